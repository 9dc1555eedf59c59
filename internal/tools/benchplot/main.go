// Command benchplot draws the cold start against resume plot of
// docs/benchmarks.md from the GPU benchmark's results (one horizontal bar
// per way of getting the 7B server to its first token, its steps stacked)
// and prints the figures as a table.
//
//	go run ./internal/tools/benchplot -o docs/benchmarks-cold-vs-resume.png docs/results/h200-server-bench.jsonl
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
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
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
		Disk   float64            `json:"diskWriteGBps"`
		Pinned map[string]float64 `json:"pinned"`
	} `json:"floors"`
}

// table prints the figures behind the plot.
func table(b *serverBench) {
	h := b.HostProcess
	rows := [][2]string{
		{"cold start to first token, in gVisor", fmt.Sprintf("%.1f s", b.ColdStart)},
		{"cold start, plain host process", fmt.Sprintf("%.1f s", h["coldStartToFirstTokenS"])},
		{"Stasis resume to first token", fmt.Sprintf("%.1f s (%.1fx faster than cold)", b.Resume, b.ColdStart/b.Resume)},
		{"raw steps to first token", fmt.Sprintf("%.1f s", b.RawResume)},
		{"driver alone: restore + first token", fmt.Sprintf("%.1f s", h["driverRestoreS"]+h["firstTokenS"])},
		{"hashing the whole image (cold cache)", fmt.Sprintf("%.1f s", b.FullVerify)},
		{"Stasis suspend / raw suspend steps", fmt.Sprintf("%.1f s / %.1f s", b.Suspend, b.RawSuspend)},
		{"image / in the store", fmt.Sprintf("%.1f GB / %.1f GB", float64(b.Image)/1e9, float64(b.Store.Stored)/1e9)},
		{"floors: pinned D2H, H2D; disk write", fmt.Sprintf("%.1f, %.1f GiB/s; %.2f GB/s", b.Floors.Pinned["d2hGiBps"], b.Floors.Pinned["h2dGiBps"], b.Floors.Disk)},
	}
	fmt.Println("| | |\n|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s |\n", r[0], r[1])
	}
}

func main() {
	out := flag.String("o", "cold-vs-resume.png", "PNG to write")
	flag.Parse()
	// The benchmark records its result as it grows; the last record of
	// each file is the most complete.
	var b *serverBench
	for _, path := range flag.Args() {
		f, err := os.Open(path)
		if err != nil {
			log.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var r serverBench
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Kind == "server-bench" {
				b = &r
			}
		}
		f.Close()
	}
	if b == nil {
		log.Fatal("no server-bench record in the files given")
	}
	c := b.ColdSteps
	rs := b.ResumeSteps
	resumeParts := rs["resume/verify"] + rs["resume/compatibility"] + rs["resume/restore"] + rs["resume/gpu-resume"]
	bars := []bar{
		{"cold start (in gVisor)", []segment{{"imports", c["imports"]}, {"weights to GPU", c["weightsOnGPU"] - c["imports"]},
			{"warm-up", c["warmedUp"] - c["weightsOnGPU"]}, {"sandbox, first token", b.ColdStart - c["warmedUp"]}}},
		{"Stasis resume", []segment{{"verify + check", rs["resume/verify"] + rs["resume/compatibility"]}, {"runsc restore", rs["resume/restore"]},
			{"GPU resume", rs["resume/gpu-resume"]}, {"first token", b.Resume - resumeParts}}},
		{"raw steps by hand", []segment{{"runsc restore", b.Raw["restore"]}, {"GPU resume", b.Raw["gpuResume"]}, {"first token", b.Raw["firstToken"]}}},
		{"driver alone (no sandbox)", []segment{{"driver restore", b.HostProcess["driverRestoreS"]}, {"first token", b.HostProcess["firstTokenS"]}}},
	}
	if err := draw7B(*out, bars); err != nil {
		log.Fatal(err)
	}
	table(b)
}

// colors keeps one color per step name across bars.
var colors = map[string]color.RGBA{
	"imports": {0x9c, 0x75, 0x5f, 0xff}, "weights to GPU": {0xb0, 0x7a, 0xa1, 0xff}, "warm-up": {0xed, 0xc9, 0x48, 0xff},
	"sandbox, first token": {0xba, 0xb0, 0xac, 0xff}, "verify + check": {0x76, 0xb7, 0xb2, 0xff}, "runsc restore": {0x4e, 0x79, 0xa7, 0xff},
	"GPU resume": {0xf2, 0x8e, 0x2b, 0xff}, "driver restore": {0xf2, 0x8e, 0x2b, 0xff}, "first token": {0xe1, 0x57, 0x59, 0xff},
}

func draw7B(path string, bars []bar) error {
	const width, left, right, top, barH, gap = 1100, 200, 70, 50, 34, 40
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
	text(img, 10, 25, "6.7B LLaMA-shaped server on an H200: seconds to the first token (steps stacked)", color.Black)
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
