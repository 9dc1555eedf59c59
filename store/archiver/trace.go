package archiver

import (
	"sync"
	"time"
)

// Trace is one piece of a restore's work, for a benchmark or a diagnosis
// of where a pull's time goes (Options.Trace): a stretch of a pack fetched
// ("run"), a chunk taken from a seed ("seed"), or a reader's wait for
// bytes not there yet ("await"). Times are since the restore began.
type Trace struct {
	Kind   string        `json:"kind"`
	Worker int           `json:"worker"`
	Start  time.Duration `json:"start"`
	End    time.Duration `json:"end"`
	// Read is the wait for the stretch's bytes (a seed's: its read),
	// Decode their decompression, Check the hashing, Write the writes
	// into the folder or memory, of which WriterWait waiting for another
	// writer of the same file.
	Read       time.Duration `json:"read,omitempty"`
	Decode     time.Duration `json:"decode,omitempty"`
	Check      time.Duration `json:"check,omitempty"`
	Write      time.Duration `json:"write,omitempty"`
	WriterWait time.Duration `json:"writerWait,omitempty"`
	// Stored and Raw are the bytes read and the chunks' own; Chunks the
	// chunks of the piece (an await's: those it waited for).
	Stored int64 `json:"stored,omitempty"`
	Raw    int64 `json:"raw,omitempty"`
	Chunks int   `json:"chunks,omitempty"`
	// Path is the file an await read (a slash path, as in the manifest),
	// Offset where in it the read began.
	Path   string `json:"path,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	// Urgent says a reader's wait moved the piece ahead of the others.
	Urgent bool `json:"urgent,omitempty"`
}

// tracer calls Options.Trace, if set, one call at a time, with times
// since the restore began.
type tracer struct {
	began time.Time
	mu    sync.Mutex
	fn    func(Trace)
}

func (t *tracer) on() bool { return t != nil && t.fn != nil }

func (t *tracer) since(at time.Time) time.Duration { return at.Sub(t.began) }

func (t *tracer) emit(tr Trace) {
	if t.on() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.fn(tr)
	}
}
