//go:build gpu

package engine_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/location"
	"github.com/stasis-run/stasis/testkit/s3test"
	"github.com/stasis-run/stasis/testkit/tracefile"
	"github.com/stasis-run/stasis/transfer"
	"golang.org/x/sync/errgroup"
)

// TestGPUAnywhere is the "resume anywhere" benchmark: the 7B server
// (llm_server.py, each mode of STASIS_ANYWHERE_MODES, default
// "plain,compiled") started cold, suspended and pushed to a local store
// folder, then resumed on "a node that never held it": the page cache
// dropped, a fresh folder, the snapshot pulled from the store and resumed
// as stasisd does (transfer.PullAndResume through a view while it pulls,
// the memory image held in memory and written into the folder after the
// resume, not synced; with STASIS_ANYWHERE_WHOLE also pulled whole first,
// with STASIS_ANYWHERE_UNSTAGED also written into the folder as it comes),
// to its first token, which must equal the one before. Beside it, in the same
// run: the page-cache resume on its own node, the disk's cold read of the
// store's pack bytes with one and eight streams (the floor), and, with
// STASIS_ANYWHERE_SECOND (1 or a list of modes, as STASIS_ANYWHERE_WHOLE),
// a second actor of the same template
// pulled onto the node that holds the first (the fetched share), and, with
// STASIS_ANYWHERE_S3 and versitygw on PATH, the same push and pull through
// S3 on loopback.
func TestGPUAnywhere(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	weights := g.llmWeights(map[string]any{})
	for _, mode := range strings.Split(getenv("STASIS_ANYWHERE_MODES", "plain,compiled"), ",") {
		result := map[string]any{"workload": "llm-6.7b", "mode": mode}
		// The kernel's write-back thresholds, under which the pulled copy
		// is written back while the pull reads.
		if w, err := node.ReadWriteback(node.WritebackDir); err == nil {
			result["writeback"] = w
		}
		repoDir := filepath.Join(g.work, "store-"+mode)
		repo := g.localRepo(repoDir)
		firstToken := g.firstToken
		// The machine's whole disks, whose counters tell what a step read
		// and wrote.
		disks := wholeDisks()
		// start runs a server actor cold and returns it with its first
		// token and the seconds to it.
		start := func(id string) (engine.Actor, llmAnswer, float64) {
			begin := time.Now()
			a := g.startActorArgs(id, []string{"/usr/bin/env", "LLM_MODE=" + mode, "HF_HUB_OFFLINE=1", g.python, "/stasis-scripts/llm_server.py", "serve", "/weights"}, specMount("/weights", weights))
			first, err := firstToken(a.ID)
			if err != nil {
				t.Fatalf("%s cold start of %s: %v", mode, id, err)
			}
			return a, first, time.Since(begin).Seconds()
		}
		// heldFiles are the files the last suspended sandbox held
		// (manifest openFiles), whose pages a resume may read again, and
		// heldAtSuspend which of their pages were in the page cache when
		// its suspend ended.
		var heldFiles []string
		var heldAtSuspend heldPages
		// suspendAndPush suspends a into a folder and pushes it as name,
		// as stasisd does (the push reading the image while the checkpoint
		// writes it, then storing the rest): the folder, the seconds of the
		// push after the suspend, of the suspend, and until the GPU was
		// free (the history's note), and what the disks wrote during the
		// suspend, in bytes.
		suspendAndPush := func(a engine.Actor, name string, to *store.Repository) (dir string, pushS, suspendS, gpuFreeS, diskWrite float64) {
			dir = filepath.Join(g.work, "snap-"+name)
			begin := time.Now()
			obs := engine.Observer{Before: g.obs.Before, After: func(ev engine.Step) {
				if ev.Name == "note" && strings.HasPrefix(ev.Message, "the GPU is free, ") {
					gpuFreeS = time.Since(begin).Seconds()
				}
				g.obs.After(ev)
			}}
			follower := archiver.NewFollower(to, 0)
			defer follower.Close()
			written := readCounters(disks).writeSect
			m, err := g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: obs, Dir: dir, Follower: follower})
			if err != nil {
				t.Fatalf("%s suspend: %v", mode, err)
			}
			suspendS = time.Since(begin).Seconds()
			// The image and, into a store on them, its packs.
			diskWrite = (readCounters(disks).writeSect - written) * 512
			pushS, err = g.timed(func() error {
				return transfer.Push(ctx, g.obs, a.ID, "suspend", dir, m, transfer.Stored{Repo: to, Name: name, Options: archiver.Options{Followed: follower}}, nil)
			})
			if err != nil {
				t.Fatalf("%s push: %v", mode, err)
			}
			result["imageBytes"] = m.Size()
			heldFiles = m.OpenFiles
			heldAtSuspend = g.heldPages(a, heldFiles)
			return dir, pushS, suspendS, gpuFreeS, diskWrite
		}
		// pullAndResume resumes a on "another node" from name, into dir,
		// to its first token, which must be want.
		// With views (stasisd's way) the sandbox is restored while the
		// pull goes on; the pull's time is then until the folder was whole
		// (the steps up to "arrived").
		// The image held in memory during the resume and written into the
		// folder after it (stasisd's way), unless unstaged; the time until
		// the folder is whole is returned last.
		views := filepath.Join(g.work, "views")
		var pullMemory transfer.PullMemory
		// lastDiskRead is what the machine's disks read during the last
		// pullAndResume, in bytes.
		var lastDiskRead float64
		// lastTail is the last pullAndResume's token_tail.
		var lastTail map[string]any
		pullAndResume := func(a engine.Actor, from *store.Repository, name, dir string, want int, v pullVariant) (float64, archiver.Pulled, float64, float64) {
			g.takeEvents()
			begin := time.Now()
			to := transfer.Stored{Repo: from, Name: name, Options: archiver.Options{NoSync: true, Seeds: v.seeds, Downloads: v.downloads, ReadAhead: v.readAhead}, Views: views}
			if v.whole {
				to.Views = ""
			}
			if !v.unstaged {
				to.Options.Stage = pullMemory.Stage
			}
			traces := traceFile(t, mode, name, v)
			if traces != nil {
				to.Options.Trace = traces.Add
			}
			// Where the time went: each step's end, and the machine's
			// disks, page cache and cores, every 100 ms.
			var marksMu sync.Mutex
			var marks []map[string]any
			stacks := g.restoreStacks(a.ID, fmt.Sprintf("anywhere-%s-%s%s", mode, name, v.name()))
			obs := engine.Observer{Before: func(ev engine.Step) error {
				stacks.before(ev)
				if g.obs.Before == nil {
					return nil
				}
				return g.obs.Before(ev)
			}, After: func(ev engine.Step) {
				stacks.after(ev)
				marksMu.Lock()
				defer marksMu.Unlock()
				marks = append(marks, map[string]any{"t": time.Since(begin).Seconds(), "step": ev.Op + "/" + ev.Name, "s": ev.Duration.Seconds(), "message": ev.Message})
				g.obs.After(ev)
			}}
			stopSampling := sampleMachine(100 * time.Millisecond)
			stopProfile := cpuProfile(t, mode, name, v)
			readBefore := readCounters(disks).readSect
			pull, err := transfer.PullAndResume(ctx, g.eng, a, dir, to, engine.ResumeOptions{Observer: obs, Prefetched: v.noPrefetch})
			var got llmAnswer
			var s, writtenS float64
			// From the resume's end to the first token: what the disks
			// read, and how much of the held files' data the page cache
			// gained (the restored processes' own files read again after
			// the drop, not the image).
			tail := map[string]any{}
			if err == nil {
				resumedS := time.Since(begin).Seconds()
				readResumed := readCounters(disks).readSect
				heldResumed := g.heldPages(a, heldFiles) // not timed
				asked := time.Now()
				got, err = firstToken(a.ID)
				tokenS := time.Since(asked).Seconds()
				s = resumedS + tokenS
				tail["disk_read_bytes"] = (readCounters(disks).readSect - readResumed) * 512
				heldToken := g.heldPages(a, heldFiles)
				lastDiskRead = (readCounters(disks).readSect - readBefore) * 512
				tail["resumed_s"], tail["token_s"] = resumedS, tokenS
				tokenRead(tail, heldAtSuspend, heldResumed, heldToken)
				lastTail = tail
				// The same request again: what the first one's took beyond
				// the exec and the token themselves.
				if err == nil {
					again := time.Now()
					_, err = firstToken(a.ID)
					tail["second_token_s"] = time.Since(again).Seconds()
				}
				if werr := pull.Written(); werr != nil && err == nil {
					err = fmt.Errorf("the pulled folder was not written: %w", werr)
				}
				writtenS = time.Since(begin).Seconds()
			}
			stopProfile()
			traces.Close()
			samples := stopSampling()
			marksMu.Lock()
			defer marksMu.Unlock()
			g.record("anywhere-timeline", map[string]any{"mode": mode, "snapshot": name, "whole": v.whole, "unstaged": v.unstaged, "seeded": len(v.seeds) > 0,
				"downloads": v.downloads, "steps": marks, "samples": samples, "first_token_s": s, "written_s": writtenS, "token_tail": tail})
			if err != nil {
				t.Fatalf("%s pull and resume of %s: %v", mode, name, err)
			}
			if got.Token != want {
				t.Errorf("%s: the first token after the pull is %d, before the suspend %d", mode, got.Token, want)
			}
			st := steps(g.takeEvents())
			pullS := st["resume/pull"]
			if !v.whole {
				pullS += st["resume/verify"] + st["resume/restore"] + st["resume/gpu-resume"] + st["resume/arrived"]
			}
			return s, pull.Pulled, pullS, writtenS
		}
		stop := func(a engine.Actor) {
			if err := g.rt.Stop(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			if err := g.rt.Delete(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
		}

		// The disk holds the weights, the store and two image copies at
		// most (the GPU machine has 64 GiB): each copy goes once it has
		// served.
		var srepo *store.Repository
		if os.Getenv("STASIS_ANYWHERE_S3") != "" {
			srv := s3test.Start(t)
			sbe, err := location.Open(ctx, srv.Location("anywhere-"+mode), srv.Env)
			if err != nil {
				t.Fatal(err)
			}
			if srepo, err = store.Init(ctx, sbe); err != nil {
				t.Fatal(err)
			}
		}
		g.dropCaches()
		a, first, coldS := start("any-" + mode)
		result["cold_s"] = coldS
		name := "any-" + mode + ".1"
		dirA, pushS, suspendS, gpuFreeS, written := suspendAndPush(a, name, repo)
		result["push_s"], result["suspend_followed_s"], result["suspend_gpu_free_s"] = pushS, suspendS, gpuFreeS
		result["suspend_followed_disk_write_bytes"], result["suspend_followed_disk_write_gbs"] = written, written/1e9/suspendS
		if srepo != nil {
			m, err := snapshot.Load(dirA)
			if err != nil {
				t.Fatal(err)
			}
			if result["s3_push_s"], err = g.timed(func() error {
				return transfer.Push(ctx, g.obs, a.ID, "suspend", dirA, m, transfer.Stored{Repo: srepo, Name: name}, nil)
			}); err != nil {
				t.Fatal(err)
			}
			// The same whole push (no follower) into a fresh local
			// store, for S3's against it.
			fullDir := filepath.Join(g.work, "store-full-"+mode)
			frepo := g.localRepo(fullDir)
			if result["local_push_whole_s"], err = g.timed(func() error {
				return transfer.Push(ctx, g.obs, a.ID, "suspend", dirA, m, transfer.Stored{Repo: frepo, Name: name}, nil)
			}); err != nil {
				t.Fatal(err)
			}
			os.RemoveAll(fullDir)
		}
		// Its own node, the image in the page cache.
		begin := time.Now()
		if _, err := g.eng.Resume(ctx, a, dirA, engine.ResumeOptions{Observer: g.obs, Verify: engine.VerifyWhileRestoring}); err != nil {
			t.Fatalf("%s local resume: %v", mode, err)
		}
		if got, err := firstToken(a.ID); err != nil || got.Token != first.Token {
			t.Fatalf("%s local resume: token %+v %v, want %d", mode, got, err, first.Token)
		}
		result["local_s"] = time.Since(begin).Seconds()
		// The same suspend without a push, for the push's share.
		dirN := filepath.Join(g.work, "snap-nopush-"+mode)
		writtenBefore := readCounters(disks).writeSect
		var err error
		if result["suspend_s"], err = g.timed(func() error {
			_, err := g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dirN})
			return err
		}); err != nil {
			t.Fatalf("%s suspend without a push: %v", mode, err)
		}
		result["suspend_disk_write_bytes"] = (readCounters(disks).writeSect - writtenBefore) * 512
		result["suspend_disk_write_gbs"] = result["suspend_disk_write_bytes"].(float64) / 1e9 / result["suspend_s"].(float64)
		result["suspend_push_over_no_push"] = (suspendS + pushS) / result["suspend_s"].(float64)
		// The first image has served (the suspend above is of the actor
		// resumed from it): its room is the next suspend's, which a 64 GiB
		// disk does not otherwise have.
		os.RemoveAll(dirA)
		if elsewhere := os.Getenv("STASIS_ANYWHERE_ELSEWHERE"); elsewhere != "" {
			// The same suspend with its push into a store that is not on
			// the image's disk (a folder there, as a store across the
			// network): the push then takes none of the disk the
			// checkpoint writes to.
			if _, err := g.eng.Resume(ctx, a, dirN, engine.ResumeOptions{Observer: g.obs, Verify: engine.VerifyWhileRestoring}); err != nil {
				t.Fatalf("%s resume before the suspend into a store elsewhere: %v", mode, err)
			}
			if got, err := firstToken(a.ID); err != nil || got.Token != first.Token {
				t.Fatalf("%s resume before the suspend into a store elsewhere: token %+v %v, want %d", mode, got, err, first.Token)
			}
			erepo := g.localRepo(filepath.Join(elsewhere, "store-"+mode))
			dirE, pushE, suspendE, _, writtenE := suspendAndPush(a, "any-"+mode+".elsewhere", erepo)
			result["suspend_elsewhere_s"], result["push_elsewhere_s"] = suspendE, pushE
			result["suspend_elsewhere_disk_write_bytes"], result["suspend_elsewhere_disk_write_gbs"] = writtenE, writtenE/1e9/suspendE
			result["suspend_push_elsewhere_over_no_push"] = (suspendE + pushE) / result["suspend_s"].(float64)
			os.RemoveAll(dirE)
			os.RemoveAll(filepath.Join(elsewhere, "store-"+mode))
		}
		os.RemoveAll(dirN)
		g.record("anywhere", result)

		// The floor: the store's pack bytes read cold.
		packs, err := fsutil.RegularFiles(filepath.Join(repoDir, "data"))
		if err != nil {
			t.Fatal(err)
		}
		var storedBytes int64
		for _, p := range packs {
			st, _ := os.Stat(p)
			storedBytes += st.Size()
		}
		result["storedBytes"] = storedBytes
		result["floorRead1S"] = g.coldRead(packs, 1)
		result["floorRead8S"] = g.coldRead(packs, 8)
		floorRead := min(result["floorRead1S"].(float64), result["floorRead8S"].(float64))
		// The data's own floor: the stored bytes at the disk's cold read
		// speed; floor_s (earlier sessions') adds the resume on its own node.
		result["data_floor_s"] = floorRead
		result["floor_s"] = floorRead + result["local_s"].(float64)

		// A node that never held it.
		g.dropCaches()
		dirB := filepath.Join(g.work, "nodeb-"+mode+"-1")
		anywhereS, pulled, pullS, writtenS := pullAndResume(a, repo, name, dirB, first.Token, pullVariant{})
		result["anywhere_s"], result["pull_s"], result["pulledBytes"], result["written_s"] = anywhereS, pullS, pulled.Fetched, writtenS
		result["pull_over_floor"] = floorRead / pullS
		result["ratio"] = coldS / anywhereS
		result["anywhere_over_floor"] = anywhereS / result["floor_s"].(float64)
		result["anywhere_over_data_floor"] = anywhereS / floorRead
		result["anywhere_disk_read_bytes"] = lastDiskRead
		stop(a)
		g.record("anywhere", result)
		// again is the same pull and resume into a fresh dirB, the page
		// cache dropped: its time to the first token and its pull's.
		again := func(v pullVariant) (float64, float64) {
			os.RemoveAll(dirB)
			if v.warmRuntime {
				// The page cache dropped, then the binary read into it.
				if _, err := fsutil.ColdRead([]string{g.rt.Path()}, 1); err != nil {
					t.Fatal(err)
				}
			} else {
				g.dropCaches()
			}
			if v.warmRootfs {
				// The page cache dropped, then the root file system's
				// metadata (every entry's inode) read into it.
				if err := statTree(a.Bundle); err != nil {
					t.Fatal(err)
				}
			}
			s, _, pullS, _ := pullAndResume(a, repo, cmp.Or(v.snapshot, name), dirB, first.Token, v)
			stop(a)
			return s, pullS
		}
		if forMode("STASIS_ANYWHERE_WHOLE", mode) {
			// Pulled whole before the restore (no view).
			wholeS, wholePullS := again(pullVariant{whole: true})
			result["anywhere_whole_s"], result["pull_whole_s"] = wholeS, wholePullS
			result["pull_whole_over_floor"] = floorRead / wholePullS
			g.record("anywhere", result)
		}
		if forMode("STASIS_ANYWHERE_UNSTAGED", mode) {
			// The image written into the folder as it arrives (the copy's
			// write-back then shares the disk with the pull).
			unstagedS, unstagedPullS := again(pullVariant{unstaged: true})
			result["anywhere_unstaged_s"], result["pull_unstaged_s"] = unstagedS, unstagedPullS
			result["unstaged_ratio"] = coldS / unstagedS
			g.record("anywhere", result)
		}
		if forMode("STASIS_ANYWHERE_WARM_RUNTIME", mode) {
			// The runtime's binary read into the page cache after the
			// drop, as on a node where it runs all the time: whether the
			// restore waits on its own code, paged in from the disk the
			// pull keeps busy.
			s, _ := again(pullVariant{warmRuntime: true})
			result["anywhere_warm_runtime_s"] = s
			g.record("anywhere", result)
		}
		if forMode("STASIS_ANYWHERE_NO_PREFETCH", mode) {
			// Without Engine.Prefetch: the restore reads runsc's binary and
			// the metadata of the files the sandbox held itself, beside the
			// pull.
			s, _ := again(pullVariant{noPrefetch: true})
			result["anywhere_no_prefetch_s"] = s
			g.record("anywhere", result)
		}
		if forMode("STASIS_ANYWHERE_WARM_ROOTFS", mode) {
			// The actor's root file system's metadata read after the drop:
			// whether the restore waits on runsc's gofer opening again,
			// one by one, the files the sandbox held, each a small read
			// queued behind the pull's on the same disk.
			s, _ := again(pullVariant{warmRootfs: true})
			result["anywhere_warm_rootfs_s"] = s
			g.record("anywhere", result)
		}
		// The same resume with other numbers of stretches read at once
		// (STASIS_ANYWHERE_DOWNLOADS, a list), each after the default's.
		if list := os.Getenv("STASIS_ANYWHERE_DOWNLOADS"); list != "" {
			var runs []map[string]any
			for _, d := range strings.Split(list, ",") {
				n, err := strconv.Atoi(d)
				if err != nil || n <= 0 {
					t.Fatalf("STASIS_ANYWHERE_DOWNLOADS=%q: want positive numbers", list)
				}
				s, pullS := again(pullVariant{downloads: n})
				runs = append(runs, map[string]any{"downloads": n, "anywhere_s": s, "pull_s": pullS, "ratio": coldS / s, "pull_over_floor": floorRead / pullS})
			}
			result["downloads"] = runs
			g.record("anywhere", result)
		}
		// Again with other read-aheads (STASIS_ANYWHERE_READAHEAD, a list
		// of MiB; -1 for none: each stretch decoded by the worker that
		// read it, as before read-ahead).
		if list := os.Getenv("STASIS_ANYWHERE_READAHEAD"); list != "" {
			var runs []map[string]any
			for _, d := range strings.Split(list, ",") {
				n, err := strconv.ParseInt(d, 10, 64)
				if err != nil || n == 0 || n < -1 {
					t.Fatalf("STASIS_ANYWHERE_READAHEAD=%q: want MiB above 0, or -1", list)
				}
				ra := max(n<<20, -1)
				s, pullS := again(pullVariant{readAhead: ra})
				runs = append(runs, map[string]any{"readAheadMiB": n, "anywhere_s": s, "pull_s": pullS, "anywhere_over_data_floor": s / floorRead, "pull_over_floor": floorRead / pullS})
			}
			result["read_ahead"] = runs
			g.record("anywhere", result)
		}
		t.Logf("%s: cold %.1f s, anywhere %.2f s (%.1fx; pull %.2f s, %.2fx the disk's cold read), floor %.2f s, own node %.2f s",
			mode, coldS, anywhereS, coldS/anywhereS, pullS, floorRead/pullS, result["floor_s"], result["local_s"])

		if forMode("STASIS_ANYWHERE_SECOND", mode) {
			// A second actor of the template, pulled onto the node that
			// holds the first (its copy in dirB, as stasisd's seeds).
			// The page cache dropped before it, as after a busy hour: each
			// chunk comes from its cheapest source, and the disk reads no
			// more than the store's bytes of the snapshot.
			b, firstB, _ := start("any2-" + mode)
			name2 := "any-" + mode + ".2"
			dirA2, _, _, _, _ := suspendAndPush(b, name2, repo)
			os.RemoveAll(dirA2)
			seed, err := repo.Snapshot(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			second, err := repo.Snapshot(ctx, name2)
			if err != nil {
				t.Fatal(err)
			}
			dirB2 := filepath.Join(g.work, "nodeb-"+mode+"-2")
			g.dropCaches()
			secondS, pulled2, _, _ := pullAndResume(b, repo, name2, dirB2, firstB.Token, pullVariant{seeds: []archiver.Seed{{Dir: dirB, Snapshot: seed}}})
			result["second_s"] = secondS
			result["second_actor_fetched_fraction"] = float64(pulled2.Fetched) / float64(pulled2.Bytes)
			result["second_actor_over_local"] = secondS / result["local_s"].(float64)
			result["second_actor_over_first"] = secondS / anywhereS
			result["second_disk_read_bytes"], result["second_store_bytes"] = lastDiskRead, storedSize(repo, second)
			result["second_disk_over_store"] = lastDiskRead / float64(storedSize(repo, second))
			stop(b)
			os.RemoveAll(dirB2)
			g.record("anywhere", result)
		}
		if forMode("STASIS_ANYWHERE_GUIDED", mode) {
			// The engine's own first reads: the actor resumed on a node
			// that never held it, asked for its first token (twice),
			// suspended there and pushed, the suspend recording what it
			// read since the resume (manifest firstReads); that snapshot
			// resumed on a node that never held it reads them before it is
			// ready. Beside it the same remote resume of the snapshot
			// taken after the cold start, which records none: without
			// (the one before the suspend), guided, without, guided. Each
			// over its own data floor (its chunks' stored bytes at the
			// speed the store's packs read cold).
			// run is one remote resume's figures, its floor added below.
			run := func(guided bool, s, pullS float64) map[string]any {
				return map[string]any{"guided": guided, "anywhere_s": s, "pull_s": pullS,
					"resumed_s": lastTail["resumed_s"], "token_s": lastTail["token_s"], "second_token_s": lastTail["second_token_s"], "token_disk_read_bytes": lastTail["disk_read_bytes"]}
			}
			os.RemoveAll(dirB)
			g.dropCaches()
			firstS, _, firstPullS, _ := pullAndResume(a, repo, name, dirB, first.Token, pullVariant{})
			runs := []map[string]any{run(false, firstS, firstPullS)}
			guidedName := name + ".guided"
			dirG, _, _, _, _ := suspendAndPush(a, guidedName, repo)
			mg, err := snapshot.Load(dirG)
			if err != nil {
				t.Fatal(err)
			}
			os.RemoveAll(dirG)
			stored := map[string]float64{}
			for _, n := range []string{name, guidedName} {
				sn, err := repo.Snapshot(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				stored[n] = float64(storedSize(repo, sn))
			}
			for _, guided := range []bool{true, false, true} {
				v := pullVariant{}
				if guided {
					v.snapshot = guidedName
				}
				s, pullS := again(v)
				runs = append(runs, run(guided, s, pullS))
			}
			speed := float64(storedBytes) / floorRead
			for _, r := range runs {
				floor := stored[name] / speed
				if r["guided"].(bool) {
					floor = stored[guidedName] / speed
				}
				r["data_floor_s"], r["anywhere_over_data_floor"] = floor, r["anywhere_s"].(float64)/floor
			}
			result["guided"] = map[string]any{"first_reads_bytes": rangesBytes(mg.FirstReads), "first_reads": len(mg.FirstReads), "runs": runs}
			g.record("anywhere", result)
		}
		os.RemoveAll(dirB)

		if srepo != nil {
			// The pull alone (no resume beside it), from the local store
			// and through S3 (versitygw on loopback), the page cache
			// dropped before each.
			pullAlone := func(from *store.Repository) float64 {
				g.dropCaches()
				stored, err := from.Snapshot(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				dirC := filepath.Join(g.work, "nodec-"+mode)
				defer os.RemoveAll(dirC)
				took, err := g.timed(func() error {
					_, err := archiver.RestoreSnapshot(ctx, from, stored, dirC, archiver.Options{NoSync: true})
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return took
			}
			localPull := pullAlone(repo)
			s3Pull := pullAlone(srepo)
			result["local_pull_s"], result["s3_pull_s"] = localPull, s3Pull
			result["s3_over_local"] = max(result["s3_push_s"].(float64)/result["local_push_whole_s"].(float64), s3Pull/localPull)
			g.record("anywhere", result)
		}
		os.RemoveAll(repoDir)
	}
}

// pullVariant is how a remote resume pulls: whole before the restore (no
// view), the memory image written into the folder as it comes rather
// than held in memory, the stretches read at once (0: the pull's default),
// and the seeds it copies from.
type pullVariant struct {
	whole, unstaged bool
	// warmRuntime reads the runtime's binary into the page cache first.
	warmRuntime bool
	// warmRootfs reads the metadata of the actor's root file system
	// into the page cache first.
	warmRootfs bool
	// noPrefetch leaves out Engine.Prefetch.
	noPrefetch bool
	// snapshot is the stored snapshot resumed; the first one's when
	// empty.
	snapshot  string
	downloads int
	// readAhead is archiver.Options.ReadAhead (0: its default).
	readAhead int64
	seeds     []archiver.Seed
}

// name is the variant's part of a file name.
func (v pullVariant) name() string {
	var s string
	if v.whole {
		s += "-whole"
	}
	if v.unstaged {
		s += "-unstaged"
	}
	if v.downloads > 0 {
		s += fmt.Sprintf("-d%d", v.downloads)
	}
	if v.readAhead != 0 {
		s += fmt.Sprintf("-ra%d", max(v.readAhead>>20, -1))
	}
	if v.warmRuntime {
		s += "-warmruntime"
	}
	if v.warmRootfs {
		s += "-warmrootfs"
	}
	if v.noPrefetch {
		s += "-noprefetch"
	}
	return s
}

// statTree reads the metadata of every entry of the root file system of
// the bundle in bundleDir and of the folders bound into it, 32 folders
// at a time.
func statTree(bundleDir string) error {
	spec, err := bundle.Load(bundleDir)
	if err != nil {
		return err
	}
	roots := []string{bundle.HostPath(bundleDir, spec.Root.Path)}
	for _, m := range spec.Mounts {
		if bundle.IsBind(m) {
			roots = append(roots, bundle.HostPath(bundleDir, m.Source))
		}
	}
	var g errgroup.Group
	g.SetLimit(32)
	var walk func(dir string)
	walk = func(dir string) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return // not a folder, or gone: nothing to read
		}
		for _, e := range entries {
			if _, err := e.Info(); err != nil || !e.IsDir() {
				continue
			}
			sub := filepath.Join(dir, e.Name())
			if !g.TryGo(func() error { walk(sub); return nil }) {
				walk(sub)
			}
		}
	}
	for _, root := range roots {
		walk(root)
	}
	return g.Wait()
}

// cpuProfile profiles this process's CPU (the pull, the view's server)
// into STASIS_ANYWHERE_CPUPROFILE/anywhere-MODE-NAME[-VARIANT].pprof until
// the returned stop, when that is set.
func cpuProfile(t *testing.T, mode, name string, v pullVariant) (stop func()) {
	dir := os.Getenv("STASIS_ANYWHERE_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("anywhere-%s-%s%s.pprof", mode, name, v.name())))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
}

// traceFile is the pull's trace file in STASIS_ANYWHERE_TRACEDIR,
// anywhere-MODE-NAME[-VARIANT].trace.jsonl.gz, or nil when that is not set.
func traceFile(t *testing.T, mode, name string, v pullVariant) *tracefile.File {
	dir := os.Getenv("STASIS_ANYWHERE_TRACEDIR")
	if dir == "" {
		return nil
	}
	return tracefile.Create(t, filepath.Join(dir, fmt.Sprintf("anywhere-%s-%s%s.trace.jsonl.gz", mode, name, v.name())))
}

// forMode says whether the setting key (1 for every mode, or a list of
// modes) asks for mode.
func forMode(key, mode string) bool {
	v := os.Getenv(key)
	return v == "1" || slices.Contains(strings.Split(v, ","), mode)
}

// coldRead is fsutil.ColdRead in seconds.
func (g *gpuEnv) coldRead(files []string, streams int) float64 {
	d, err := fsutil.ColdRead(files, streams)
	if err != nil {
		g.t.Fatal(err)
	}
	return d.Seconds()
}

// storedSize is the store's bytes of snapshot s: each of its chunks once,
// compressed, as a pull of it alone would read them.
func storedSize(repo *store.Repository, s *store.Snapshot) int64 {
	seen := map[string]bool{}
	var n int64
	for _, f := range s.Files {
		for _, id := range f.Chunks {
			if c, ok := repo.Chunk(id); ok && !seen[id] {
				seen[id] = true
				n += c.Stored
			}
		}
	}
	return n
}

// heldPages are the page maps of the files a sandbox held (manifest
// openFiles, found on the host through a's bundle), by path inside the
// container, each with whether it lies in the container's root file
// system (or a mount); a file not found is left out.
type heldPages map[string]heldFile

type heldFile struct {
	pages fsutil.PageMap
	root  bool
}

func (g *gpuEnv) heldPages(a engine.Actor, held []string) heldPages {
	spec, err := bundle.Load(a.Bundle)
	if err != nil {
		g.t.Logf("held files: %v", err)
		return nil
	}
	root := bundle.HostPath(a.Bundle, spec.Root.Path)
	hp := heldPages{}
	for _, p := range held {
		host := bundle.HostPathOf(spec, a.Bundle, p)
		f, err := os.Open(host)
		if err != nil {
			continue
		}
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			if pages, err := fsutil.ResidentPages(f); err == nil {
				// In the root file system where no mount holds it (the
				// root may be the host's own /).
				hp[p] = heldFile{pages: pages, root: host == filepath.Join(root, p)}
			}
		}
		f.Close()
	}
	return hp
}

// tokenRead puts into tail what the held files' page cache held at the
// suspend's end, the resume's and the first token's, and which pages the
// first token brought in (in the cache after it, not after the resume):
// how many of those the suspend's cache also held, of the root file
// system's files and of all, the set a prefetch of what was cached at the
// suspend would have read.
func tokenRead(tail map[string]any, suspended, resumed, token heldPages) {
	page := int64(os.Getpagesize())
	var size, atSuspend, rootAtSuspend, atResume, atToken, read, readCachedAtSuspend, readRootCachedAtSuspend int64
	for p, t := range token {
		size += t.pages.Size
		atToken += t.pages.Bytes(0, t.pages.Size)
		s, r := suspended[p], resumed[p]
		atResume += r.pages.Bytes(0, r.pages.Size)
		cached := s.pages.Bytes(0, s.pages.Size)
		atSuspend += cached
		if t.root {
			rootAtSuspend += cached
		}
		for at := int64(0); at < t.pages.Size; at += page {
			if t.pages.Bytes(at, page) == 0 || r.pages.Bytes(at, page) != 0 {
				continue
			}
			n := min(page, t.pages.Size-at)
			read += n
			if s.pages.Bytes(at, page) != 0 {
				readCachedAtSuspend += n
				if t.root {
					readRootCachedAtSuspend += n
				}
			}
		}
	}
	tail["held_bytes"], tail["held_cached_suspended_bytes"], tail["held_root_cached_suspended_bytes"] = size, atSuspend, rootAtSuspend
	tail["held_cached_resumed_bytes"], tail["held_cached_token_bytes"] = atResume, atToken
	tail["token_read_bytes"], tail["token_read_cached_at_suspend_bytes"], tail["token_read_root_cached_at_suspend_bytes"] = read, readCachedAtSuspend, readRootCachedAtSuspend
}

// rangesBytes is the bytes rs covers.
func rangesBytes(rs []snapshot.FileRange) int64 {
	var n int64
	for _, r := range rs {
		n += r.Length
	}
	return n
}
