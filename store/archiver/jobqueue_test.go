package archiver

import (
	"testing"

	"github.com/stasis-run/stasis/store"
)

// TestAwaitedStretchDecodedFirst: of the stretches fetched and waiting
// for a decoder, one holding a chunk a reader awaits is decoded next,
// also when it was still being fetched as the reader asked; the others
// follow in the order fetched, and a wait for a stretch already being
// decoded changes nothing.
func TestAwaitedStretchDecodedFirst(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	q := &jobQueue{byChunk: map[string]int{}, awaited: map[int]bool{}}
	for i, id := range ids {
		q.jobs = append(q.jobs, job{index: i, run: &store.Run{Pack: id, Chunks: []store.RunChunk{{ID: id}}}})
		q.byChunk[id] = i
	}
	q.taken, q.decoding = make([]bool, len(ids)), make([]bool, len(ids))
	for range ids {
		if _, ok := q.take(); !ok {
			t.Fatal("a job was not handed out")
		}
	}
	q.fetched(fetchedRun{job: 0})
	q.fetched(fetchedRun{job: 1})
	q.hurry("d") // still being fetched
	q.fetched(fetchedRun{job: 2})
	q.fetched(fetchedRun{job: 3})
	if fr := q.nextFetched(); fr.job != 3 || !fr.trace.Urgent {
		t.Fatalf("first decoded: job %d (urgent %v), want the awaited 3", fr.job, fr.trace.Urgent)
	}
	if fr := q.nextFetched(); fr.job != 0 {
		t.Fatalf("then job %d, want 0, the first fetched", fr.job)
	}
	q.hurry("a") // being decoded
	q.hurry("c")
	var order []int
	for range 2 {
		order = append(order, q.nextFetched().job)
	}
	if order[0] != 2 || order[1] != 1 || len(q.awaited) != 0 {
		t.Fatalf("then %v (awaited left %v), want [2 1]", order, q.awaited)
	}
}
