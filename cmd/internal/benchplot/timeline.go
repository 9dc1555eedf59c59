package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"

	"github.com/stasis-run/stasis/node"
)

// timeline is one "anywhere-timeline" record of TestGPUAnywhere: a pull
// and resume's steps and the machine sampled every 100 ms.
type timeline struct {
	Mode     string `json:"mode"`
	Snapshot string `json:"snapshot"`
	Seeded   bool   `json:"seeded"`
	// Unstaged is unset in records from before the image was held in
	// memory during the resume (session 18).
	Unstaged *bool `json:"unstaged"`
	Steps    []struct {
		T    float64 `json:"t"`
		Step string  `json:"step"`
	} `json:"steps"`
	Samples []struct {
		T        float64 `json:"t"`
		DirtyMiB float64 `json:"dirtyMiB"`
		ReadMBs  float64 `json:"readMBs"`
		WriteMBs float64 `json:"writeMBs"`
	} `json:"samples"`
	// label names the run in the plot: its file and mode.
	label string
}

var (
	readColor  = color.RGBA{0x59, 0xa1, 0x4f, 0xff}
	writeColor = color.RGBA{0xe1, 0x57, 0x59, 0xff}
	dirtyColor = color.RGBA{0x9a, 0x9a, 0x9a, 0xff}
)

// drawTimelines draws one panel per timeline, on one time scale: the
// disks' reads and writes in GB/s and the page cache's dirty GiB, and a
// mark where the resume ended.
func drawTimelines(path, on string, runs []*timeline) error {
	const width, left, right, top, panelH, gap = 1100, 60, 30, 50, 200, 70
	height := top + len(runs)*(panelH+gap)
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	var tMax, rateMax, dirtyMax float64
	for _, r := range runs {
		for _, s := range r.Samples {
			tMax = max(tMax, s.T)
			rateMax = max(rateMax, s.ReadMBs/1000, s.WriteMBs/1000)
			dirtyMax = max(dirtyMax, s.DirtyMiB/1024)
		}
	}
	if tMax == 0 || rateMax == 0 {
		return fmt.Errorf("the timelines have no samples")
	}
	// Room on the right for the last mark's label.
	tMax *= 1.12
	rateMax, dirtyMax = float64(int(rateMax)+1), float64(int(dirtyMax/5)+1)*5
	text(img, 10, 25, "On "+on+": a resume on a node that never held the snapshot; disk read (green) and written (red) in GB/s, dirty page cache (gray) in GiB", color.Black)
	xOf := func(t float64) int { return left + int(t/tMax*float64(width-left-right)) }
	for i, r := range runs {
		y0 := top + i*(panelH+gap) + 20
		base := y0 + panelH
		yOf := func(v, top float64) int { return base - int(v/top*float64(panelH)) }
		text(img, left, y0-6, r.label, color.Black)
		line(img, left, base, width-right, base, color.Gray{0x60})
		line(img, left, y0, left, base, color.Gray{0x60})
		text(img, 8, y0+10, fmt.Sprintf("%.0f GB/s", rateMax), readColor)
		text(img, 8, y0+24, fmt.Sprintf("%.0f GiB", dirtyMax), dirtyColor)
		for s := 0; s <= int(tMax); s++ {
			text(img, xOf(float64(s))-3, base+14, fmt.Sprint(s), color.Gray{0x40})
		}
		for j := 1; j < len(r.Samples); j++ {
			a, b := r.Samples[j-1], r.Samples[j]
			line(img, xOf(a.T), yOf(a.DirtyMiB/1024, dirtyMax), xOf(b.T), yOf(b.DirtyMiB/1024, dirtyMax), dirtyColor)
			line(img, xOf(a.T), yOf(a.WriteMBs/1000, rateMax), xOf(b.T), yOf(b.WriteMBs/1000, rateMax), writeColor)
			line(img, xOf(a.T), yOf(a.ReadMBs/1000, rateMax), xOf(b.T), yOf(b.ReadMBs/1000, rateMax), readColor)
		}
		var end float64
		for _, s := range r.Steps {
			end = max(end, s.T)
		}
		line(img, xOf(end), y0, xOf(end), base, color.Black)
		text(img, xOf(end)+4, y0+12, fmt.Sprintf("resumed %.2f s", end), color.Black)
	}
	text(img, width/2-30, height-12, "seconds since the pull began", color.Gray{0x40})
	return writePNG(path, img)
}

// writebackLabel names the background threshold w sets.
func writebackLabel(w node.Writeback) string {
	if w.BackgroundBytes > 0 {
		return fmt.Sprintf("from %d GiB dirty (vm.dirty_background_bytes)", w.BackgroundBytes>>30)
	}
	return fmt.Sprintf("from %d%% of memory (vm.dirty_background_ratio)", w.BackgroundRatio)
}

// line draws a 2-pixel line from (x0, y0) to (x1, y1).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	steps := max(abs(x1-x0), abs(y1-y0), 1)
	for k := 0; k <= steps; k++ {
		x := x0 + (x1-x0)*k/steps
		y := y0 + (y1-y0)*k/steps
		img.Set(x, y, c)
		img.Set(x, y+1, c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
