// Package tracefile writes a pull's trace (archiver.Options.Trace) for a
// benchmark: one JSON line a piece, gzipped.
package tracefile

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"testing"

	"github.com/stasis-run/stasis/store/archiver"
)

// File is a trace being written.
type File struct {
	t   testing.TB
	f   *os.File
	gz  *gzip.Writer
	enc *json.Encoder
}

// Create makes the trace file at path; a failure fails t.
func Create(t testing.TB, path string) *File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	return &File{t: t, f: f, gz: gz, enc: json.NewEncoder(gz)}
}

// Add is an archiver.Options.Trace.
func (tf *File) Add(tr archiver.Trace) { _ = tf.enc.Encode(tr) }

// Close ends the file; nil is a trace not written, and closes nothing.
func (tf *File) Close() {
	if tf == nil {
		return
	}
	if err := tf.gz.Close(); err != nil {
		tf.t.Error(err)
	}
	if err := tf.f.Close(); err != nil {
		tf.t.Error(err)
	}
}
