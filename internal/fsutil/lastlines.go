package fsutil

import (
	"errors"
	"io"
	"os"
	"strings"
)

// LastLines is the last n lines of the file at path that lie within its
// last within bytes (a line cut by that bound is left out): the end of a
// log, quoted in an error. An empty file has none.
func LastLines(path string, n int, within int64) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	start := max(info.Size()-within, 0)
	buf := make([]byte, info.Size()-start)
	if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	text := strings.TrimRight(string(buf), "\n")
	if text == "" {
		return nil, nil
	}
	lines := strings.Split(text, "\n")
	if start > 0 && len(lines) > 1 {
		lines = lines[1:] // cut mid-line
	}
	return lines[max(len(lines)-n, 0):], nil
}
