//go:build gpu

package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
)

// llmAnswer is llm_client.py's reply.
type llmAnswer struct {
	Token   int                `json:"token"`
	Seconds float64            `json:"seconds"`
	PID     int                `json:"pid"`
	Timings map[string]float64 `json:"timings"`
}

func (g *gpuEnv) llm(id, path string) (llmAnswer, error) {
	var a llmAnswer
	res, err := g.rt.Exec(context.Background(), id, runtime.Process{Args: []string{g.python, "/stasis-scripts/llm_client.py", path}})
	if err != nil {
		return a, err
	}
	if res.ExitCode != 0 {
		return a, fmt.Errorf("llm_client %s: exit %d: %s %s", path, res.ExitCode, res.Stdout, res.Stderr)
	}
	return a, json.Unmarshal(res.Stdout, &a)
}

// firstToken asks the server in sandbox id for a token, waiting up to 15
// minutes for it to come up: compiling and capturing can take minutes
// before its socket is up.
func (g *gpuEnv) firstToken(id string) (llmAnswer, error) {
	var a llmAnswer
	res, err := g.rt.Exec(context.Background(), id, runtime.Process{Args: []string{g.python, "/stasis-scripts/llm_client.py", "/token", "900"}})
	if err != nil {
		return a, err
	}
	if res.ExitCode != 0 {
		return a, fmt.Errorf("llm_client: exit %d: %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	return a, json.Unmarshal(res.Stdout, &a)
}

// hostLLM asks a server running as a plain host process on socket.
func (g *gpuEnv) hostLLM(socket, path string) (llmAnswer, error) {
	var a llmAnswer
	cmd := exec.Command(g.python, filepath.Join(g.scripts, "llm_client.py"), path)
	cmd.Env = append(os.Environ(), "LLM_SOCKET="+socket)
	out, err := cmd.Output()
	if err != nil {
		return a, fmt.Errorf("llm_client %s: %v: %s", path, err, out)
	}
	return a, json.Unmarshal(out, &a)
}

// TestGPUServerBench is the cold start against resume benchmark: a 6.7B
// parameter LLaMA-shaped model (random bf16 weights, made once into
// STASIS_LLM_DIR) served over HTTP by transformers inside a gVisor actor.
// It times, in one run: the cold start to the first token (page cache
// dropped); the engine's suspend and its resume to the first token; the
// same raw steps by hand (helper, runsc checkpoint, restore); the same
// server as a plain host process, cold and through the driver's own
// checkpoint and restore; the snapshot's size in the store; and the
// machine's copy and disk speeds (floors.py).
func TestGPUServerBench(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	result := map[string]any{"workload": "llm-6.7b"}
	weights := g.llmWeights(result)
	dropCaches := g.dropCaches
	// STASIS_SERVER_CACHE=warm leaves the image in the page cache for the
	// resumes, as on a node that resumes soon after it suspended; the
	// default drops it, so the image comes off the disk.
	resumeCache := getenv("STASIS_SERVER_CACHE", "cold")
	result["resumeCache"] = resumeCache
	dropForResume := func() {
		if resumeCache == "cold" {
			dropCaches()
		}
	}
	mustLLM := func(id, path string) llmAnswer {
		a, err := g.llm(id, path)
		if err != nil {
			t.Fatalf("%s %s: %v", id, path, err)
		}
		return a
	}

	// Cold start in a sandbox.
	dropCaches()
	start := time.Now()
	a := g.startActorArgs("llm", []string{g.python, "/stasis-scripts/llm_server.py", "serve", "/weights"}, specMount("/weights", weights))
	first := mustLLM(a.ID, "/token")
	result["coldStartToFirstTokenS"] = time.Since(start).Seconds()
	result["coldStartSteps"] = mustLLM(a.ID, "/info").Timings
	token := first.Token
	// Each part is recorded as it ends, so a run cut short keeps what it had;
	// benchplot merges the parts.
	g.record("server-bench", result)

	// The engine's cycle and the raw steps run on the same process, one after
	// the other; STASIS_SERVER_ORDER=raw-first swaps them, since the
	// driver's first restore of a process may be slower than its second.
	engineCycle := func() {
		// The engine's suspend, then its resume to the first token.
		dir := filepath.Join(g.work, "snap-llm")
		g.takeEvents()
		var m *snapshot.Manifest
		suspendS, err := g.timed(func() (err error) {
			m, err = g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		result["engineSuspendS"] = suspendS
		result["engineSuspendSteps"] = steps(g.takeEvents())
		result["imageBytes"] = m.Size()
		// Reading and hashing the whole image, as a resume with VerifyBlocks
		// does, timed on its own; the resume itself checks sizes, as stasisd's
		// resumes of snapshots it committed or pulled do.
		dropCaches()
		if result["fullVerifyS"], err = g.timed(func() error { _, err := snapshot.Verify(context.Background(), dir); return err }); err != nil {
			t.Fatal(err)
		}
		dropForResume()
		start = time.Now()
		if _, err := g.eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs, Verify: engine.VerifySizes}); err != nil {
			t.Fatal(err)
		}
		resumed := mustLLM(a.ID, "/token")
		result["engineResumeToFirstTokenS"] = time.Since(start).Seconds()
		result["engineResumeSteps"] = steps(g.takeEvents())
		if resumed.Token != token {
			t.Errorf("the first token after the resume is %d, before the suspend %d", resumed.Token, token)
		}
		result["speedup"] = result["coldStartToFirstTokenS"].(float64) / result["engineResumeToFirstTokenS"].(float64)
		g.record("server-bench", result)

		// The snapshot in the store: stored bytes against logical, when the
		// disk has room for a second copy (the weights and the image are there).
		var fs unix.Statfs_t
		if err := unix.Statfs(g.work, &fs); err != nil {
			t.Fatal(err)
		}
		if free := int64(fs.Bavail) * fs.Bsize; free < m.Size()*6/5 {
			result["store"] = map[string]any{"skipped": fmt.Sprintf("%d bytes free for a %d-byte image", free, m.Size())}
		} else {
			result["store"] = g.storeSize(dir)
		}
		g.record("server-bench", result)
		os.RemoveAll(dir)
	}
	byHand := func() {
		// The raw steps by hand, on the same actor.
		image := filepath.Join(g.work, "llm-raw")
		drop := timedStep{"dropCaches", func() error { dropForResume(); return nil }}
		raw := g.rawCycle(a, image, []timedStep{drop}, timedStep{"firstToken", func() error {
			got, err := g.llm(a.ID, "/token")
			if err == nil && got.Token != token {
				err = fmt.Errorf("token %d after the raw restore, want %d", got.Token, token)
			}
			return err
		}})
		result["raw"] = raw
		result["rawSuspendS"] = raw["gpuSuspend"] + raw["checkpoint"] + raw["stop"] + raw["delete"]
		result["rawResumeToFirstTokenS"] = raw["restore"] + raw["gpuResume"] + raw["firstToken"]
		g.record("server-bench", result)
		os.RemoveAll(image)
	}
	order := getenv("STASIS_SERVER_ORDER", "engine-first")
	result["order"] = order
	if order == "raw-first" {
		byHand()
		engineCycle()
	} else {
		engineCycle()
		byHand()
	}
	_ = g.rt.Delete(ctx, a.ID)

	// The same server as a plain process: cold, then the driver's own
	// checkpoint and restore (stasis-cuda --toggle, as cuda-checkpoint).
	dropCaches()
	start = time.Now()
	server := exec.Command(g.python, filepath.Join(g.scripts, "llm_server.py"), "serve", weights)
	hostSocket := filepath.Join(g.work, "llm-host.sock")
	server.Env = append(os.Environ(), "LLM_SOCKET="+hostSocket, "HF_HUB_OFFLINE=1")
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = server.Process.Kill(); _ = server.Wait() }()
	if _, err := g.hostLLM(hostSocket, "/token"); err != nil {
		t.Fatal(err)
	}
	host := map[string]float64{"coldStartToFirstTokenS": time.Since(start).Seconds()}
	toggle := func() error {
		out, err := exec.Command(g.helper, "--toggle", "--pid", fmt.Sprint(server.Process.Pid)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("toggle: %v: %s", err, out)
		}
		return nil
	}
	var err error
	if host["driverCheckpointS"], err = g.timed(toggle); err != nil {
		t.Fatal(err)
	}
	if host["driverRestoreS"], err = g.timed(toggle); err != nil {
		t.Fatal(err)
	}
	host["firstTokenS"], err = g.timed(func() error {
		got, err := g.hostLLM(hostSocket, "/token")
		if err == nil && got.Token != token {
			err = fmt.Errorf("token %d after the driver's restore, want %d", got.Token, token)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	result["hostProcess"] = host
	g.record("server-bench", result)

	result["floors"] = g.floors()
	g.record("server-bench", result)
	t.Logf("cold start %.1f s, resume to first token %.1f s (%.1fx); raw %.1f s; driver alone %.1f s",
		result["coldStartToFirstTokenS"], result["engineResumeToFirstTokenS"], result["speedup"], result["rawResumeToFirstTokenS"],
		host["driverRestoreS"]+host["firstTokenS"])
	if !strings.Contains(fmt.Sprint(result["engineResumeSteps"]), "gpu-resume") {
		t.Errorf("resume steps lack the GPU step: %v", result["engineResumeSteps"])
	}
}

// llmWeights is the folder of the 7B model's weights (STASIS_LLM_DIR),
// made there first when missing; the time that took goes into result.
func (g *gpuEnv) llmWeights(result map[string]any) string {
	weights := getenv("STASIS_LLM_DIR", filepath.Join(filepath.Dir(g.work), "llm-7b"))
	if _, err := os.Stat(filepath.Join(weights, "config.json")); err != nil {
		start := time.Now()
		out, err := exec.Command(g.python, filepath.Join(g.scripts, "llm_server.py"), "make", weights).CombinedOutput()
		if err != nil {
			g.t.Fatalf("make the model: %v\n%s", err, out)
		}
		result["makeWeightsS"] = time.Since(start).Seconds()
	}
	return weights
}

func (g *gpuEnv) dropCaches() {
	if err := fsutil.DropPageCache(); err != nil {
		g.t.Fatalf("drop the page cache: %v", err)
	}
}

// TestGPUServerResume is the production-style server benchmark of the
// resume-speed issue: for each mode of STASIS_SERVER_MODES (default
// "compiled,plain"; llm_server.py's LLM_MODE) the 7B server in a gVisor
// actor is started cold (page cache dropped) to its first token, suspended
// once by the engine, then resumed twice to its first token: warm (the
// image in the page cache, as on a node that resumes soon after it
// suspended) and cold (page cache dropped); before that, "kept": suspended
// with its sandbox kept frozen and resumed from memory, as stasisd's pause
// does while the node has room. STASIS_SERVER_RESUMES (default
// "kept,warm,cold") picks among the three. Each first token after a resume
// must equal the one before the suspend.
func TestGPUServerResume(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	weights := g.llmWeights(map[string]any{})
	for _, mode := range strings.Split(getenv("STASIS_SERVER_MODES", "compiled,plain"), ",") {
		result := map[string]any{"workload": "llm-6.7b", "mode": mode, "thp": hostTHP()}
		firstToken := g.firstToken
		g.dropCaches()
		start := time.Now()
		a := g.startActorArgs("llm-"+mode, []string{"/usr/bin/env", "LLM_MODE=" + mode, "HF_HUB_OFFLINE=1", g.python, "/stasis-scripts/llm_server.py", "serve", "/weights"}, specMount("/weights", weights))
		first, err := firstToken(a.ID)
		if err != nil {
			t.Fatalf("%s cold start: %v", mode, err)
		}
		result["coldS"] = time.Since(start).Seconds()
		info, err := g.llm(a.ID, "/info")
		if err != nil {
			t.Fatal(err)
		}
		result["coldSteps"] = info.Timings
		g.record("server-resume", result)

		resumes := strings.Split(getenv("STASIS_SERVER_RESUMES", "kept,warm,cold"), ",")
		if slices.Contains(resumes, "kept") {
			// Suspended with the sandbox kept frozen, as stasisd's pause
			// does while the node has room, and resumed from memory.
			kept := filepath.Join(g.work, "kept-"+a.ID)
			g.takeEvents()
			start = time.Now()
			keep := func() (bool, string) { return true, "the benchmark keeps it" }
			if _, err := g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: kept, Keep: keep}); err != nil {
				t.Fatalf("%s suspend, kept: %v", mode, err)
			}
			result["suspend_kept_s"] = time.Since(start).Seconds()
			result["suspend_kept_steps"] = steps(g.takeEvents())
			start = time.Now()
			if err := g.eng.ResumeKept(ctx, a, kept, engine.ResumeOptions{Observer: g.obs}); err != nil {
				t.Fatalf("%s kept resume: %v", mode, err)
			}
			got, err := firstToken(a.ID)
			if err != nil {
				t.Fatalf("%s first token after the kept resume: %v", mode, err)
			}
			result["resume_kept_s"] = time.Since(start).Seconds()
			result["resume_kept_steps"] = steps(g.takeEvents())
			if got.Token != first.Token {
				t.Errorf("%s: the first token after the kept resume is %d, before the suspend %d", mode, got.Token, first.Token)
			}
			g.record("server-resume", result)
			os.RemoveAll(kept)
		}
		dir := filepath.Join(g.work, "snap-"+a.ID)
		g.takeEvents()
		start = time.Now()
		m, err := g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
		if err != nil {
			t.Fatalf("%s suspend: %v", mode, err)
		}
		result["suspendS"] = time.Since(start).Seconds()
		result["suspendSteps"] = steps(g.takeEvents())
		result["imageBytes"] = m.Size()
		for _, cache := range []string{"warm", "cold"} {
			if !slices.Contains(resumes, cache) {
				continue
			}
			if cache == "cold" {
				g.dropCaches()
			}
			start := time.Now()
			if _, err := g.eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs, Verify: engine.VerifyWhileRestoring}); err != nil {
				t.Fatalf("%s %s resume: %v", mode, cache, err)
			}
			got, err := firstToken(a.ID)
			if err != nil {
				t.Fatalf("%s first token after the %s resume: %v", mode, cache, err)
			}
			result["resume_"+cache+"_s"] = time.Since(start).Seconds()
			result["resume_"+cache+"_steps"] = steps(g.takeEvents())
			if got.Token != first.Token {
				t.Errorf("%s: the first token after the %s resume is %d, before the suspend %d", mode, cache, got.Token, first.Token)
			}
			g.record("server-resume", result)
			if err := g.rt.Stop(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			if err := g.rt.Delete(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
		}
		os.RemoveAll(dir)
		for _, r := range resumes {
			if s, ok := result["resume_"+r+"_s"].(float64); ok {
				t.Logf("%s: cold start %.1f s, resume to first token %s %.2f s (%.1fx)", mode, result["coldS"], r, s, result["coldS"].(float64)/s)
			}
		}
	}
}

// storeSize saves the snapshot in dir into a fresh local store and says
// its logical and stored bytes; a failure is reported in the result, not
// fatal, so that the measurements after it still run.
func (g *gpuEnv) storeSize(dir string) map[string]any {
	ctx := context.Background()
	repoDir := filepath.Join(g.work, "store")
	defer os.RemoveAll(repoDir)
	be, err := local.New(repoDir)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	repo, err := store.Init(ctx, be)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	saveS, err := g.timed(func() error { _, err := archiver.Save(ctx, repo, "snapshot", dir, archiver.Options{}); return err })
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	du, err := repo.DU(ctx)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	return map[string]any{"saveS": saveS, "logicalBytes": du.Logical, "storedBytes": du.Stored, "ratio": du.Dedup}
}
