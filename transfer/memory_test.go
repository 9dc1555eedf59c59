package transfer

import "testing"

// TestPullMemoryLends: PullMemory lends the node's memory to images held
// in memory only while, with what it has lent counted, the node keeps its
// reserve; what is given back (once, however often release is called) can
// be lent again.
func TestPullMemoryLends(t *testing.T) {
	var m PullMemory
	room := stageRoom()
	if room < 3 {
		t.Fatalf("this machine has %d bytes to hold images in; the test needs some", room)
	}
	if m.Stage(1<<60) != nil {
		t.Fatal("an image larger than the node's memory was lent room")
	}
	size := room * 2 / 3
	first := m.Stage(size)
	if first == nil {
		t.Fatalf("an image of %d bytes, with %d to hold images in, was refused", size, room)
	}
	if m.Stage(size) != nil {
		t.Fatalf("a second image of %d bytes was lent room beside the first (room %d)", size, room)
	}
	first()
	first()
	if m.lent != 0 {
		t.Fatalf("after the release, %d bytes are still lent", m.lent)
	}
	second := m.Stage(size)
	if second == nil {
		t.Fatal("the room given back was not lent again")
	}
	second()
}
