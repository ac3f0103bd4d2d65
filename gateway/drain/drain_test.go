package drain

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A stream that ends within the grace is never told to end; the drain is
// idle once it has.
func TestStreamWithinGrace(t *testing.T) {
	gauge := map[Kind]int{}
	d := New(time.Hour, func(k Kind, delta int) { gauge[k] += delta })
	ending, done, err := d.Track(KindCommand)
	if err != nil {
		t.Fatal(err)
	}
	if gauge[KindCommand] != 1 || d.InFlight(KindCommand) != 1 {
		t.Fatalf("in flight = %d, gauge %v", d.InFlight(KindCommand), gauge)
	}
	d.Begin()
	if _, _, err := d.Track(KindTransfer); !errors.Is(err, ErrDraining) {
		t.Fatalf("Track after Begin = %v, want ErrDraining", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Wait(ctx); err == nil {
		t.Fatal("Wait returned with a stream in flight")
	}
	done()
	done() // a second call changes nothing
	if err := d.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ending:
		t.Fatal("the stream was told to end within the grace")
	default:
	}
	if gauge[KindCommand] != 0 || gauge[KindTransfer] != 0 {
		t.Fatalf("gauge after the stream = %v", gauge)
	}
	d.Close()
}

// A stream still running when the grace is over is told to end.
func TestGraceOver(t *testing.T) {
	d := New(time.Nanosecond, nil)
	ending, done, err := d.Track(KindTransfer)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	d.Begin()
	d.Begin()
	<-ending // closed by the grace timer; the test times out otherwise
	if !d.Ended() {
		t.Fatal("Ended is false after the ending channel closed")
	}
}

// Close tells every stream to end at once, with or without Begin.
func TestClose(t *testing.T) {
	d := New(0, nil)
	if d.Grace() != DefaultGrace {
		t.Fatalf("grace = %v, want the default %v", d.Grace(), DefaultGrace)
	}
	ending, done, err := d.Track(KindCommand)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	d.Close()
	select {
	case <-ending:
	default:
		t.Fatal("Close did not end the stream")
	}
	if !d.Draining() {
		t.Fatal("not draining after Close")
	}
	done()
	if err := d.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A drainer retired by a reload is not drained then; the process exit
// (BeginAll) drains it with the current one. Idle retired drainers are
// forgotten at the next Retire.
func TestGroup(t *testing.T) {
	var g Group
	old := New(time.Nanosecond, nil)
	ending, done, err := old.Track(KindCommand)
	if err != nil {
		t.Fatal(err)
	}
	idle := New(time.Nanosecond, nil)
	g.Retire(old)
	g.Retire(idle)
	if g.Retired() != 1 || old.Draining() {
		t.Fatalf("retired %d, old draining %v; want 1 and false", g.Retired(), old.Draining())
	}
	current := New(time.Hour, nil)
	g.BeginAll(current)
	if !current.Draining() {
		t.Fatal("BeginAll did not begin the current drainer")
	}
	<-ending // the retired drainer's grace (1ns) ends its stream
	waited := make(chan error, 1)
	go func() { waited <- g.Wait(context.Background()) }()
	done()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	g.Retire(New(time.Nanosecond, nil))
	if g.Retired() != 0 {
		t.Fatalf("retired %d after the old drainer went idle, want 0", g.Retired())
	}
	current.Close()
}
