//go:build pullbench

// The pull benchmark: a snapshot pulled from a local store with the page
// cache dropped, beside the disk's own cold read of the same pack bytes
// with one and with eight streams, measured in the same run:
//
//	go test -tags pullbench -run TestPullBench -v -timeout 60m ./store/archiver
//
// It needs root (to drop the page cache). STASIS_PULL_GIB sets the
// snapshot's size (default 4), STASIS_PULL_RUNS the runs (default 3),
// STASIS_BENCH_DIR the folder on the disk to measure (default the system
// temp folder), STASIS_PULL_DOWNLOADS the stretches read at once (default
// the pull's own; a list such as 16,32 takes turns run by run); with
// STASIS_BENCH_OUT it writes pullbench.json there. The snapshot is weights-like: bf16 values whose high bytes (sign and
// exponent) take few values and whose low bytes are random, as a model's.
// STASIS_PULL_WRITEBACK takes turns, run by run, between write-back
// settings: "kernel" (the machine's; the default) and "deferred"
// (vm.dirty_background_bytes above the snapshot's size, so that the kernel
// does not write the pulled copy back while the pull reads), and "staged"
// (the machine's, the memory image held in memory and written into the
// folder once every chunk is fetched: Options.Stage); the machine's
// settings are put back at the end. The pull's time is until every chunk
// is fetched and checked; the folder's, until it is whole. Beside the pull,
// a reader reads the memory image in order as it arrives, as runsc's
// background restore does (readInOrder): its time says how closely a
// restore can follow the pull.
package archiver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/procfs"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
	"github.com/stasis-run/stasis/testkit/tracefile"
)

type pullRow struct {
	Run           int     `json:"run"`
	StoredBytes   int64   `json:"storedBytes"`
	LogicalBytes  int64   `json:"logicalBytes"`
	Floor1S       float64 `json:"floor1S"`
	Floor8S       float64 `json:"floor8S"`
	PullS         float64 `json:"pullS"`
	PullOverFloor float64 `json:"pullOverFloor"`
	WrittenS      float64 `json:"writtenS"`
	// InOrderS is when the reader of the image in order read its end,
	// InOrderHalfS when it had read its first half; PullHalfS is when the
	// pull had read half the stored bytes (by its progress reports).
	InOrderS     float64 `json:"inOrderS"`
	InOrderHalfS float64 `json:"inOrderHalfS"`
	PullHalfS    float64 `json:"pullHalfS"`
	// FirstReadS is when the pull first reported bytes read (its reports
	// come every quarter second); Progress is the bytes read from the
	// store at each report.
	FirstReadS float64        `json:"firstReadS"`
	Progress   [][2]float64   `json:"progress"`
	Downloads  int            `json:"downloads"`
	PeakRSSMiB float64        `json:"peakRssMiB"`
	Writeback  writeback      `json:"writeback"`
	Settings   node.Writeback `json:"settings"`
}

func TestPullBench(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the pull benchmark drops the page cache and needs root")
	}
	gib := envInt(t, "STASIS_PULL_GIB", 4)
	runs := envInt(t, "STASIS_PULL_RUNS", 3)
	downloads := []int{0} // the pull's default
	if list := os.Getenv("STASIS_PULL_DOWNLOADS"); list != "" {
		downloads = downloads[:0]
		for _, v := range strings.Split(list, ",") {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				t.Fatalf("STASIS_PULL_DOWNLOADS=%q: want positive numbers", list)
			}
			downloads = append(downloads, n)
		}
	}
	base, err := os.MkdirTemp(os.Getenv("STASIS_BENCH_DIR"), "pullbench-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	ctx := context.Background()
	src := filepath.Join(base, "snap")
	weightsLike(t, src, int64(gib)<<30)
	be, err := local.New(filepath.Join(base, "repo"))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := store.Init(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := archiver.Save(ctx, repo, "s", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(src)
	stored, err := repo.Snapshot(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	// The memory image, which the reader in order reads beside the pull.
	i := slices.IndexFunc(stored.Files, func(f store.File) bool { return f.Path == "image/pages.img" })
	if i < 0 {
		t.Fatal("the stored snapshot has no image/pages.img")
	}
	image := stored.Files[i]
	packs := packFiles(t, filepath.Join(base, "repo", "data"))
	var storedBytes int64
	for _, p := range packs {
		st, _ := os.Stat(p)
		storedBytes += st.Size()
	}
	writeback, err := parseWriteback(os.Getenv("STASIS_PULL_WRITEBACK"))
	if err != nil {
		t.Fatal(err)
	}
	machineDirty, err := node.ReadWriteback(node.WritebackDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := setWriteback(machineDirty); err != nil {
			t.Errorf("put back the machine's write-back settings: %v", err)
		}
	})
	var rows []pullRow
	for run := 1; run <= runs; run++ {
		r := pullRow{Run: run, StoredBytes: storedBytes, LogicalBytes: stored.Size(), Writeback: writeback[(run-1)%len(writeback)],
			Downloads: downloads[(run-1)%len(downloads)]}
		if err := r.Writeback.apply(machineDirty, stored.Size()); err != nil {
			t.Fatal(err)
		}
		if r.Settings, err = node.ReadWriteback(node.WritebackDir); err != nil {
			t.Fatal(err)
		}
		r.Floor1S = coldRead(t, packs, 1)
		r.Floor8S = coldRead(t, packs, 8)
		dropCaches(t)
		out := filepath.Join(base, "out")
		start := time.Now()
		opts := archiver.Options{NoSync: true, Downloads: r.Downloads, ProgressEvery: 250 * time.Millisecond,
			Progress: func(p archiver.Progress) {
				at := time.Since(start).Seconds()
				if p.Stored > 0 && r.FirstReadS == 0 {
					r.FirstReadS = at
				}
				r.Progress = append(r.Progress, [2]float64{at, float64(p.Stored)})
				if r.PullHalfS == 0 && 2*p.Stored >= storedBytes {
					r.PullHalfS = at
				}
			}}
		if r.Writeback == writebackStaged {
			opts.Stage = func(int64) func() { return func() {} }
		}
		traces := benchTrace(t, run)
		if traces != nil {
			opts.Trace = traces.Add
		}
		f, err := archiver.StartRestore(ctx, repo, stored, out, opts)
		if err != nil {
			t.Fatal(err)
		}
		inOrder := make(chan error, 1)
		go func() {
			err := readInOrder(ctx, f, image.Path, image.Size, func() { r.InOrderHalfS = time.Since(start).Seconds() })
			r.InOrderS = time.Since(start).Seconds()
			inOrder <- err
		}()
		if _, err := f.Fetched(); err != nil {
			t.Fatal(err)
		}
		r.PullS = time.Since(start).Seconds()
		if err := <-inOrder; err != nil {
			t.Fatal(err)
		}
		if _, err := f.Wait(); err != nil {
			t.Fatal(err)
		}
		r.WrittenS = time.Since(start).Seconds()
		traces.Close()
		r.PullOverFloor = min(r.Floor1S, r.Floor8S) / r.PullS
		if peak, err := procfs.StatusBytes("/proc", os.Getpid(), "VmHWM"); err == nil {
			r.PeakRSSMiB = float64(peak) / (1 << 20)
		}
		if _, err := snapshot.Load(out); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(out)
		rows = append(rows, r)
		t.Logf("run %d (write-back %s, %d downloads): floor 1 stream %.2f s, 8 streams %.2f s, pull %.2f s (first read %.2f s): %.2fx the floor; half the stored bytes read %.2f s, half the image read in order %.2f s, all %.2f s; folder whole %.2f s",
			run, r.Writeback, r.Downloads, r.Floor1S, r.Floor8S, r.PullS, r.FirstReadS, r.PullOverFloor, r.PullHalfS, r.InOrderHalfS, r.InOrderS, r.WrittenS)
	}
	fmt.Printf("| run | write-back | downloads | logical | stored (read) | cold read, 1 stream | cold read, 8 streams | pull | first read | pull / floor | half read | half read in order | read in order | folder whole | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %d | %.2f GB | %.2f GB | %.2f s (%.2f GB/s) | %.2f s (%.2f GB/s) | %.2f s (%.2f GB/s) | %.2f s | %.2fx | %.2f s | %.2f s | %.2f s | %.2f s | %.0f MiB |\n", r.Run, r.Writeback, r.Downloads,
			float64(r.LogicalBytes)/1e9, float64(r.StoredBytes)/1e9, r.Floor1S, float64(r.StoredBytes)/1e9/r.Floor1S, r.Floor8S, float64(r.StoredBytes)/1e9/r.Floor8S,
			r.PullS, float64(r.StoredBytes)/1e9/r.PullS, r.FirstReadS, r.PullOverFloor, r.PullHalfS, r.InOrderHalfS, r.InOrderS, r.WrittenS, r.PeakRSSMiB)
	}
	if dir := os.Getenv("STASIS_BENCH_OUT"); dir != "" {
		data, _ := json.MarshalIndent(rows, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "pullbench.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readInOrder reads the file at path of a restore under way from its
// start to its end, as runsc's background restore reads a memory image:
// 256 KiB a read, up to 128 reads in flight, each issued in order, each
// awaiting its bytes (which it hurries) before it reads them. It calls half
// once it has read the file's first half.
func readInOrder(ctx context.Context, f *archiver.Filling, path string, size int64, half func()) error {
	const piece, inFlight = 256 << 10, 128
	file, err := f.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inFlight)
	buffers := make(chan []byte, inFlight)
	for range inFlight {
		buffers <- make([]byte, piece)
	}
	var firstHalf atomic.Int64 // pieces of the first half not yet read
	firstHalf.Store((size/2 + piece - 1) / piece)
	for off := int64(0); off < size && gctx.Err() == nil; off += piece {
		n := min(piece, size-off)
		g.Go(func() error {
			buf := <-buffers
			defer func() { buffers <- buf }()
			if err := f.Await(gctx, path, off, n); err != nil {
				return err
			}
			if _, err := file.ReadAt(buf[:n], off); err != nil {
				return err
			}
			if 2*off < size && firstHalf.Add(-1) == 0 {
				half()
			}
			return nil
		})
	}
	return g.Wait()
}

func envInt(t *testing.T, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", key, v)
	}
	return n
}

// weightsLike writes a committed snapshot folder whose image is size bytes
// of bf16-like values.
func weightsLike(t *testing.T, dir string, size int64) {
	if err := os.MkdirAll(filepath.Join(dir, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "image", "pages.img"))
	if err != nil {
		t.Fatal(err)
	}
	// The high byte of a bf16 weight drawn from N(0, 0.02): its sign and
	// the top of its exponent, a handful of values.
	high := []byte{0x3c, 0x3c, 0x3c, 0x3c, 0x3b, 0x3b, 0x3b, 0x3a, 0x3d, 0xbc, 0xbc, 0xbc, 0xbc, 0xbb, 0xbb, 0xbb, 0xba, 0xbd, 0x39, 0xb9}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 16<<20)
	for written := int64(0); written < size; written += int64(len(buf)) {
		for i := 0; i+8 <= len(buf); i += 8 {
			v := r.Uint64()
			for j := 0; j < 8; j += 2 {
				buf[i+j] = byte(v >> (8 * j))
				buf[i+j+1] = high[int(v>>(8*j+8))%len(high)]
			}
		}
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Commit(context.Background(), dir, snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: "bench"}); err != nil {
		t.Fatal(err)
	}
}

func packFiles(t *testing.T, dir string) []string {
	files, err := fsutil.RegularFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func dropCaches(t *testing.T) {
	if err := fsutil.DropPageCache(); err != nil {
		t.Fatalf("drop the page cache: %v", err)
	}
}

// coldRead is fsutil.ColdRead in seconds.
func coldRead(t *testing.T, files []string, streams int) float64 {
	d, err := fsutil.ColdRead(files, streams)
	if err != nil {
		t.Fatal(err)
	}
	return d.Seconds()
}

// writeback is how the kernel writes the pulled copy back during a run.
type writeback string

const (
	writebackKernel   writeback = "kernel"
	writebackDeferred writeback = "deferred"
	writebackStaged   writeback = "staged"
)

func parseWriteback(list string) ([]writeback, error) {
	if list == "" {
		return []writeback{writebackKernel}, nil
	}
	var out []writeback
	for _, w := range strings.Split(list, ",") {
		switch writeback(w) {
		case writebackKernel, writebackDeferred, writebackStaged:
			out = append(out, writeback(w))
		default:
			return nil, fmt.Errorf("STASIS_PULL_WRITEBACK: %q is not kernel, deferred or staged", w)
		}
	}
	return out, nil
}

// apply sets the machine's settings (kernel, staged) or thresholds that a
// pull of size bytes stays under (deferred).
func (w writeback) apply(machine node.Writeback, size int64) error {
	if w != writebackDeferred {
		return setWriteback(machine)
	}
	return setWriteback(node.Writeback{BackgroundBytes: 2 * size, Bytes: 4 * size})
}

// setWriteback writes the thresholds w sets (not 0): writing one form of
// a pair zeroes the other. The kernel takes them in any order (a
// background threshold at or above the limit counts as half the limit).
func setWriteback(w node.Writeback) error {
	for name, v := range map[string]int64{
		"dirty_background_ratio": w.BackgroundRatio, "dirty_background_bytes": w.BackgroundBytes,
		"dirty_ratio": w.Ratio, "dirty_bytes": w.Bytes,
	} {
		if v == 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(node.WritebackDir, name), []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// benchTrace is run's trace file in STASIS_BENCH_OUT, or nil.
func benchTrace(t *testing.T, run int) *tracefile.File {
	dir := os.Getenv("STASIS_BENCH_OUT")
	if dir == "" {
		return nil
	}
	return tracefile.Create(t, filepath.Join(dir, fmt.Sprintf("pullbench-%d.trace.jsonl.gz", run)))
}
