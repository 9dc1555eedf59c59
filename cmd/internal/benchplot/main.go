// Command benchplot draws the plots of docs/benchmarks.md from the GPU
// benchmarks' results, one horizontal bar per way, steps stacked: the cold
// start against resume benchmark (the 7B server to its first token, and
// per synthetic actor its cold start and its resume to the first GPU
// operation), and the resume-speed benchmark (per size, the driver's own
// restore beside each way of resuming the same snapshot). It prints the
// figures as tables.
//
//	go run ./cmd/internal/benchplot -o docs/benchmarks-cold-vs-resume.png docs/results/h200-server-bench.jsonl
//	go run ./cmd/internal/benchplot -o docs/benchmarks-resume-speed.png docs/results/h200-resume-r2.jsonl docs/results/h200-resume-r3.jsonl
//	go run ./cmd/internal/benchplot -o docs/benchmarks-anywhere.png docs/results/h200-anywhere-view-plain-s14.jsonl docs/results/h200-anywhere-view-compiled-s14.jsonl
//	go run ./cmd/internal/benchplot -o /dev/null -timeline docs/benchmarks-anywhere-timeline.png docs/results/h200-anywhere-timeline-s16.jsonl
//
// With -timeline it also draws the anywhere benchmark's timelines (disk
// reads and writes and dirty pages over a resume), one panel each.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"log"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/stasis-run/stasis/node"
)

type segment struct {
	label   string
	seconds float64
}

type bar struct {
	label    string
	segments []segment
}

type serverBench struct {
	Kind        string             `json:"kind"`
	ResumeCache string             `json:"resumeCache"`
	ColdStart   float64            `json:"coldStartToFirstTokenS"`
	ColdSteps   map[string]float64 `json:"coldStartSteps"`
	Resume      float64            `json:"engineResumeToFirstTokenS"`
	ResumeSteps map[string]float64 `json:"engineResumeSteps"`
	Suspend     float64            `json:"engineSuspendS"`
	RawSuspend  float64            `json:"rawSuspendS"`
	RawResume   float64            `json:"rawResumeToFirstTokenS"`
	FullVerify  float64            `json:"fullVerifyS"`
	Image       int64              `json:"imageBytes"`
	Raw         map[string]float64 `json:"raw"`
	HostProcess map[string]float64 `json:"hostProcess"`
	Store       struct {
		Stored int64 `json:"storedBytes"`
	} `json:"store"`
	Floors struct {
		Disk     float64            `json:"diskWriteGBps"`
		DiskRead float64            `json:"diskReadGBps"`
		Pinned   map[string]float64 `json:"pinned"`
	} `json:"floors"`
}

// syntheticBench is TestGPUBench's record of one synthetic actor.
type syntheticBench struct {
	Kind        string             `json:"kind"`
	GiB         float64            `json:"gib"`
	ColdStart   float64            `json:"coldStartToFirstOpS"`
	Suspend     float64            `json:"engineSuspendS"`
	Resume      float64            `json:"engineResumeToFirstOpS"`
	ResumeSteps map[string]float64 `json:"resumeSteps"`
	RawSuspend  float64            `json:"rawSuspendS"`
	RawResume   float64            `json:"rawResumeToFirstOpS"`
	Image       int64              `json:"imageBytes"`
	Store       struct {
		Stored  int64  `json:"storedBytes"`
		Skipped string `json:"skipped"`
		Error   string `json:"error"`
	} `json:"store"`
}

// resumeVariant is TestGPUResumeSpeed's record of one resume.
type resumeVariant struct {
	Kind     string             `json:"kind"`
	GiB      float64            `json:"gib"`
	Variant  string             `json:"variant"`
	Resume   float64            `json:"resumeS"`
	FirstOp  float64            `json:"resumeToFirstGPUOpS"`
	Driver   float64            `json:"driverRestoreS"`
	Steps    map[string]float64 `json:"steps"`
	ZeroGiB  string             `json:"zeroGib"`
	Image    int64              `json:"imageBytes"`
	Verified string             `json:"check"`
	// THP is the host's transparent huge page settings of the run
	// (shmem_enabled/defrag), where the record has them.
	THP string `json:"thp"`
}

// anywhereRun is TestGPUAnywhere's record of one server mode: resumed on
// a node that never held its snapshot.
type anywhereRun struct {
	Kind        string  `json:"kind"`
	Mode        string  `json:"mode"`
	Cold        float64 `json:"cold_s"`
	Anywhere    float64 `json:"anywhere_s"`
	Whole       float64 `json:"anywhere_whole_s"`
	Pull        float64 `json:"pull_s"`
	PullWhole   float64 `json:"pull_whole_s"`
	Floor       float64 `json:"floor_s"`
	Local       float64 `json:"local_s"`
	FloorRead1S float64 `json:"floorRead1S"`
	FloorRead8S float64 `json:"floorRead8S"`
	// Writeback is the kernel's thresholds it ran under (since session 16).
	Writeback *node.Writeback `json:"writeback"`
}

// anywhereBars are, per mode, the floor and the ways to the first token on
// a node that never held the snapshot (the cold start, minutes long, is in
// the table only).
func anywhereBars(runs []*anywhereRun) []bar {
	var bars []bar
	for _, r := range runs {
		read := min(r.FloorRead1S, r.FloorRead8S)
		bars = append(bars, bar{r.Mode + ": floor", []segment{{"disk read of the stored bytes", read}, {"resume on its own node", r.Local}}})
		if r.Whole > 0 {
			bars = append(bars, bar{r.Mode + ": pulled first", []segment{{"pull", r.PullWhole}, {"resume to first token", r.Whole - r.PullWhole}}})
		}
		bars = append(bars, bar{r.Mode + ": resumed while it pulls", []segment{{"pull (restore and GPU resume beside it)", r.Pull}, {"to first token", r.Anywhere - r.Pull}}})
	}
	return bars
}

func anywhereTable(runs []*anywhereRun) {
	fmt.Println("| server | cold start | resumed while it pulls | ratio | pulled whole, then resumed | floor | own node |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range runs {
		whole := "-"
		if r.Whole > 0 {
			whole = fmt.Sprintf("%.2f s", r.Whole)
		}
		fmt.Printf("| %s | %.1f s | %.2f s | %.1fx | %s | %.2f s | %.2f s |\n", r.Mode, r.Cold, r.Anywhere, r.Cold/r.Anywhere, whole, r.Floor, r.Local)
	}
}

// way names a resume's variant, with its huge page settings when known.
func (r *resumeVariant) way() string {
	if r.THP == "" {
		return r.Variant
	}
	return r.Variant + ", THP " + r.THP
}

// resumeBars are, per size, the driver's own restore and each resume.
func resumeBars(rows []*resumeVariant) []bar {
	var bars []bar
	var last float64
	for _, r := range rows {
		if r.GiB != last {
			bars = append(bars, bar{fmt.Sprintf("%g GiB: driver alone", r.GiB), []segment{{"driver restore", r.Driver}}})
			last = r.GiB
		}
		st := r.Steps
		gpu, restore := st["resume/gpu-resume"], st["resume/restore"]
		bars = append(bars, bar{fmt.Sprintf("%g GiB: %s", r.GiB, r.way()), []segment{{"runsc restore", restore}, {"GPU resume", gpu},
			{"verify + check", r.Resume - restore - gpu}, {"first GPU op", r.FirstOp - r.Resume}}})
	}
	return bars
}

// resumeTable prints one row per resume.
func resumeTable(rows []*resumeVariant) {
	fmt.Println("| GiB | way | runsc restore | GPU resume | driver alone | GPU resume / driver | resume | to first GPU op | data |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		gpu := r.Steps["resume/gpu-resume"]
		fmt.Printf("| %g | %s | %.2f s | %.2f s | %.2f s | %.2fx | %.2f s | %.2f s | %s |\n",
			r.GiB, r.way(), r.Steps["resume/restore"], gpu, r.Driver, gpu/r.Driver, r.Resume, r.FirstOp, r.Verified)
	}
}

// syntheticTable prints one row per synthetic actor.
func syntheticTable(rows []*syntheticBench) {
	fmt.Println("| actor | cold start to first GPU op | Stasis suspend (raw steps) | image | in the store | Stasis resume to first GPU op (raw steps) | speed-up |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range rows {
		stored := fmt.Sprintf("%.1f GB", float64(r.Store.Stored)/1e9)
		if r.Store.Skipped != "" || r.Store.Error != "" {
			stored = "not measured: " + r.Store.Skipped + r.Store.Error
		}
		fmt.Printf("| %g GiB | %.1f s | %.1f s (%.1f s) | %.1f GB | %s | %.1f s (%.1f s) | %.1fx |\n",
			r.GiB, r.ColdStart, r.Suspend, r.RawSuspend, float64(r.Image)/1e9, stored, r.Resume, r.RawResume, r.ColdStart/r.Resume)
	}
}

// table prints the figures behind the plot.
func table(b *serverBench) {
	h := b.HostProcess
	rows := [][2]string{
		{"cold start to first token, in gVisor", fmt.Sprintf("%.1f s", b.ColdStart)},
		{"cold start, plain host process", fmt.Sprintf("%.1f s", h["coldStartToFirstTokenS"])},
		{"Stasis resume to first token" + cacheNote(b), fmt.Sprintf("%.1f s (%.1fx faster than cold)", b.Resume, b.ColdStart/b.Resume)},
		{"raw steps to first token", fmt.Sprintf("%.1f s", b.RawResume)},
		{"driver alone: restore + first token", fmt.Sprintf("%.1f s", h["driverRestoreS"]+h["firstTokenS"])},
		{"hashing the whole image (cold cache)", fmt.Sprintf("%.1f s", b.FullVerify)},
		{"Stasis suspend / raw suspend steps", fmt.Sprintf("%.1f s / %.1f s", b.Suspend, b.RawSuspend)},
		{"image / in the store", fmt.Sprintf("%.1f GB / %.1f GB", float64(b.Image)/1e9, float64(b.Store.Stored)/1e9)},
		{"floors: pinned D2H, H2D; disk write", fmt.Sprintf("%.1f, %.1f GiB/s; %.2f GB/s", b.Floors.Pinned["d2hGiBps"], b.Floors.Pinned["h2dGiBps"], b.Floors.Disk)},
	}
	if b.Floors.DiskRead > 0 {
		rows = append(rows, [2]string{"floor: reading the image from disk (cold cache)",
			fmt.Sprintf("%.1f s at %.2f GB/s", float64(b.Image)/1e9/b.Floors.DiskRead, b.Floors.DiskRead)})
	}
	fmt.Println("| | |\n|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s |\n", r[0], r[1])
	}
}

func main() {
	out := flag.String("o", "cold-vs-resume.png", "PNG to write")
	timelineOut := flag.String("timeline", "", "also draw the anywhere benchmark's timelines into this PNG")
	on := flag.String("on", "an H200", "the machine the figures were measured on, for the titles")
	flag.Parse()
	// The benchmarks record their results as they grow; the last record
	// of each workload is the most complete.
	var b *serverBench
	synthetic := map[float64]*syntheticBench{}
	var resumes []*resumeVariant
	anywhere := map[string]*anywhereRun{}
	var modes []string
	var timelines []*timeline
	for _, path := range flag.Args() {
		writeback := map[string]string{} // by mode, as the file's anywhere records say
		f, err := os.Open(path)
		if err != nil {
			log.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var kind struct{ Kind string }
			if json.Unmarshal(sc.Bytes(), &kind) != nil {
				continue
			}
			switch kind.Kind {
			case "server-bench":
				var r serverBench
				if json.Unmarshal(sc.Bytes(), &r) == nil {
					b = &r
				}
			case "resume-variant":
				var r resumeVariant
				if json.Unmarshal(sc.Bytes(), &r) == nil {
					resumes = append(resumes, &r)
				}
			case "anywhere-timeline":
				var r timeline
				if json.Unmarshal(sc.Bytes(), &r) == nil && len(r.Samples) > 0 {
					r.label = fmt.Sprintf("%s: %s", filepath.Base(path), r.Snapshot)
					if r.Seeded {
						r.label += " (seeded)"
					}
					if r.Unstaged != nil && *r.Unstaged {
						r.label += ", image written as it came"
					} else if r.Unstaged != nil {
						r.label += ", image held in memory"
					}
					if w := writeback[r.Mode]; w != "" {
						r.label += ", write-back " + w
					}
					timelines = append(timelines, &r)
				}
			case "anywhere":
				var r anywhereRun
				if json.Unmarshal(sc.Bytes(), &r) != nil {
					continue
				}
				if r.Writeback != nil {
					writeback[r.Mode] = writebackLabel(*r.Writeback)
				}
				if r.Anywhere > 0 {
					if anywhere[r.Mode] == nil {
						modes = append(modes, r.Mode)
					}
					anywhere[r.Mode] = &r
				}
			case "bench":
				var r syntheticBench
				if json.Unmarshal(sc.Bytes(), &r) == nil && r.ColdStart > 0 {
					synthetic[r.GiB] = &r
				}
			}
		}
		f.Close()
	}
	if *timelineOut != "" {
		if err := drawTimelines(*timelineOut, *on, timelines); err != nil {
			log.Fatal(err)
		}
	}
	if b == nil && len(synthetic) == 0 && len(resumes) == 0 && len(anywhere) == 0 {
		log.Fatal("no server-bench, bench, resume-variant or anywhere record in the files given")
	}
	var runs []*anywhereRun
	for _, m := range modes {
		runs = append(runs, anywhere[m])
	}
	bars := append(resumeBars(resumes), anywhereBars(runs)...)
	if b != nil {
		bars = append(bars, serverBars(b)...)
	}
	sizes := slices.Sorted(maps.Keys(synthetic))
	var rows []*syntheticBench
	for _, gib := range sizes {
		r := synthetic[gib]
		rows = append(rows, r)
		rs := r.ResumeSteps
		parts := rs["resume/verify"] + rs["resume/compatibility"] + rs["resume/restore"] + rs["resume/gpu-resume"]
		bars = append(bars,
			bar{fmt.Sprintf("%g GiB actor: cold start", gib), []segment{{"cold start", r.ColdStart}}},
			bar{fmt.Sprintf("%g GiB actor: resume", gib), []segment{{"verify + check", rs["resume/verify"] + rs["resume/compatibility"]},
				{"runsc restore", rs["resume/restore"]}, {"GPU resume", rs["resume/gpu-resume"]}, {"first GPU op", r.Resume - parts}}})
	}
	if err := drawBars(*out, *on, bars); err != nil {
		log.Fatal(err)
	}
	if b != nil {
		table(b)
		fmt.Println()
	}
	if len(rows) > 0 {
		syntheticTable(rows)
	}
	if len(resumes) > 0 {
		resumeTable(resumes)
	}
	if len(runs) > 0 {
		anywhereTable(runs)
	}
}

// cacheNote says where the resumes read the image from.
func cacheNote(b *serverBench) string {
	if b.ResumeCache == "warm" {
		return " (image in the page cache)"
	}
	return " (image read from disk)"
}

// serverBars are the 7B server's ways to its first token.
func serverBars(b *serverBench) []bar {
	c := b.ColdSteps
	rs := b.ResumeSteps
	resumeParts := rs["resume/verify"] + rs["resume/compatibility"] + rs["resume/restore"] + rs["resume/gpu-resume"]
	return []bar{
		{"7B: cold start (gVisor)", []segment{{"imports", c["imports"]}, {"weights to GPU", c["weightsOnGPU"] - c["imports"]},
			{"warm-up", c["warmedUp"] - c["weightsOnGPU"]}, {"sandbox, first token", b.ColdStart - c["warmedUp"]}}},
		{"7B: Stasis resume", []segment{{"verify + check", rs["resume/verify"] + rs["resume/compatibility"]}, {"runsc restore", rs["resume/restore"]},
			{"GPU resume", rs["resume/gpu-resume"]}, {"first token", b.Resume - resumeParts}}},
		{"7B: raw steps by hand", []segment{{"runsc restore", b.Raw["restore"]}, {"GPU resume", b.Raw["gpuResume"]}, {"first token", b.Raw["firstToken"]}}},
		{"7B: driver alone", []segment{{"driver restore", b.HostProcess["driverRestoreS"]}, {"first token", b.HostProcess["firstTokenS"]}}},
	}
}

// colors keeps one color per step name across bars.
var colors = map[string]color.RGBA{
	"imports": {0x9c, 0x75, 0x5f, 0xff}, "weights to GPU": {0xb0, 0x7a, 0xa1, 0xff}, "warm-up": {0xed, 0xc9, 0x48, 0xff},
	"sandbox, first token": {0xba, 0xb0, 0xac, 0xff}, "verify + check": {0x76, 0xb7, 0xb2, 0xff}, "runsc restore": {0x4e, 0x79, 0xa7, 0xff},
	"GPU resume": {0xf2, 0x8e, 0x2b, 0xff}, "driver restore": {0xf2, 0x8e, 0x2b, 0xff}, "first token": {0xe1, 0x57, 0x59, 0xff},
	"first GPU op": {0xe1, 0x57, 0x59, 0xff}, "cold start": {0xba, 0xb0, 0xac, 0xff},
	"disk read of the stored bytes": {0x59, 0xa1, 0x4f, 0xff}, "resume on its own node": {0x4e, 0x79, 0xa7, 0xff},
	"pull": {0x59, 0xa1, 0x4f, 0xff}, "resume to first token": {0x4e, 0x79, 0xa7, 0xff},
	"pull (restore and GPU resume beside it)": {0x8c, 0xd1, 0x7d, 0xff}, "to first token": {0xe1, 0x57, 0x59, 0xff},
}

func drawBars(path, on string, bars []bar) error {
	const width, left, right, top, barH, gap = 1100, 230, 70, 50, 34, 40
	height := top + len(bars)*(barH+gap) + 40
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	var longest float64
	for _, b := range bars {
		var total float64
		for _, s := range b.segments {
			total += s.seconds
		}
		longest = max(longest, total)
	}
	scale := float64(width-left-right) / longest
	text(img, 10, 25, "On "+on+": seconds to the first token (7B server) or the first GPU operation, steps stacked", color.Black)
	for i, b := range bars {
		y := top + i*(barH+gap)
		text(img, 10, y+barH/2+4, b.label, color.Black)
		x := float64(left)
		var total float64
		for _, s := range b.segments {
			w := s.seconds * scale
			if w > 0 {
				draw.Draw(img, image.Rect(int(x), y, int(x+w), y+barH), &image.Uniform{colors[s.label]}, image.Point{}, draw.Src)
				if w > 60 {
					text(img, int(x)+3, y+barH+13, fmt.Sprintf("%s %.1f", s.label, s.seconds), color.Gray{0x40})
				}
			}
			x += max(w, 0)
			total += s.seconds
		}
		text(img, int(x)+6, y+barH/2+4, fmt.Sprintf("%.1f s", total), color.Black)
	}
	return writePNG(path, img)
}

func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func text(img draw.Image, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
