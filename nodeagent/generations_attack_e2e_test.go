package nodeagent_test

// Attacks on generation management that the crash matrices of
// generations_e2e_test.go do not cover: crashes inside a step, files
// planted in the state directory, a full disk. Each test documents a
// boundary that holds (or held after its fix); the built binary, the Core
// stand-in and the real Docker engine, as there.

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/internal/fakecore"
	"github.com/sandgate/sandgate/nodeagent/lease"
	"github.com/sandgate/sandgate/nodeagent/preparer"
)

// A preparer killed after it wrote the manifest's bytes but before it
// renamed them into place leaves those bytes in the version directory.
// The preparation resumes after the restart; much later Core lets the
// generation go, and the reclamation must still finish: what a crash of
// the node's own writer leaves behind is a known partial file, not an
// unknown one that blocks the reclamation for ever.
func TestCrashInsideTheManifestWriteThenReclaim(t *testing.T) {
	w := newGWorld(t)
	d1 := w.release(1, "rel-one")
	d2 := w.release(2, "rel-two")
	w.writeConfig(1, d1)
	w.interruptPreparation(preparer.CrashPrepareManifestWritten, d1)

	// Restart: generation 1 is prepared from its plan, then the operator
	// rolls to 2 and Core lets 1 go.
	w.start()
	a := w.core.Accept().Auto(dep(1, d1, nil), keepAll)
	a.WaitObservations(fakecore.State(1, proto.GenerationReady))
	a.SetDeployment(dep(2, d2, ptr64(2)))
	a.WaitObservations(fakecore.State(2, proto.GenerationReady))
	a.SetKeep(dropOne)
	w.untilReclaimed()
	w.reclaimed()
}

// A named pipe planted in place of a version file (someone with the
// node's user, or a broken backup restore) must be refused like any other
// file that is not a private regular file — not opened for reading, which
// blocks until a writer appears: the serial worker would hang in the
// repair for the whole 30-minute attempt, holding the installation lock,
// and again at every retry, so no other generation could be prepared.
func TestFIFOPlantedInTheVersionDirectoryIsRefused(t *testing.T) {
	w := newGWorld(t)
	d1 := w.release(1, "rel-one")
	w.writeConfig(1, d1)
	p := w.start()
	a := w.core.Accept().Auto(dep(1, d1, nil), nil)
	a.WaitObservations(fakecore.State(1, proto.GenerationReady))
	fifo := filepath.Join(w.generations().FilesPath(1), "seccomp.json")
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Releases a reader the pipe may have caught.
		if fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			syscall.Close(fd)
		}
	})
	// The probe finds the profile missing, the repair looks at the pipe
	// and refuses at once; the pipe is left for inspection.
	w.waitLog(p, `"msg":"preparer job ended","kind":"repair","generation":1,"ok":false,"busy":false,"refused":true`)
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the planted pipe was changed: %v %v", fi, err)
	}
	a.WaitObservations(fakecore.State(1, proto.GenerationFailed))
}

// A full disk under the node's state directory (a 1 MiB tmpfs, smaller
// than the image tarball): the preparation fails with storage_full, the
// generation is reported failed with that diagnostic and nothing is
// published; once the disk has room again, the restarted node finishes
// the preparation from what is there, leaving no stray file.
func TestFullDiskDuringPreparation(t *testing.T) {
	w := newGWorld(t)
	d1 := w.release(1, "rel-one")
	w.writeConfig(1, d1)
	if err := os.Mkdir(w.state, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", w.state).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", w.state).Run() })
	p := w.start()
	a := w.core.Accept().Auto(dep(1, d1, nil), nil)
	obs := a.WaitObservations(fakecore.State(1, proto.GenerationFailed))
	if obs[0].Diagnostic != proto.DiagStorageFull {
		t.Fatalf("observation %+v, want failed storage_full", obs[0])
	}
	gens := w.generations()
	if _, err := gens.ReadConfig(1); !os.IsNotExist(err) {
		t.Fatalf("a configuration was published on a full disk: %v", err)
	}
	w.kill(p)

	if out, err := exec.Command("mount", "-o", "remount,size=64m", w.state).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v %s", err, out)
	}
	w.start()
	a = w.core.Accept().Auto(dep(1, d1, nil), nil)
	a.WaitObservations(fakecore.State(1, proto.GenerationReady))
	ents, err := os.ReadDir(gens.FilesPath(1))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"image.tar", "manifest.json", "provider.json", "seccomp.json"}; !slices.Equal(names, want) {
		t.Fatalf("version files %v, want %v", names, want)
	}
	for _, r := range []genstate.Record{genstate.RecordPlan, genstate.RecordJournal} {
		if ok, _ := gens.Exists(1, r); ok {
			t.Fatalf("%s left behind", r)
		}
	}
	gents, _ := os.ReadDir(gens.Path())
	for _, e := range gents {
		if e.Name()[0] == '.' {
			t.Fatalf("a temporary file was left in the generations directory: %s", e.Name())
		}
	}
}

// The retention exchange: while a request is pending the node sends no
// other, however many heartbeat_acks pass; after a reconnect, the old
// connection's exact drop answer — with its own connection ID or the new
// one — deletes nothing; only the new connection's exact answer reclaims.
func TestRetentionOnePendingAndAcksAfterReconnect(t *testing.T) {
	w := newGWorld(t)
	d1 := w.release(1, "rel-one")
	d2 := w.release(2, "rel-two")
	w.writeConfig(1, d1)
	w.start()
	conn := w.core.Accept()
	a := conn.Auto(dep(1, d1, nil), nil)
	a.WaitObservations(fakecore.State(1, proto.GenerationReady))
	a.HoldAcks(true)
	a.SetDeployment(dep(2, d2, ptr64(2)))
	a.WaitObservations(fakecore.State(2, proto.GenerationReady))
	first := a.NextHeld()
	for first.Entries[0].Generation != 1 {
		first = a.NextHeld()
	}
	n := len(a.Retentions())
	seen := 0
	a.WaitObservations(func([]proto.GenerationObservation) bool { seen++; return seen >= 5 })
	if got := len(a.Retentions()); got != n {
		t.Fatalf("%d retention requests while one was pending", got-n)
	}
	drop := func(r *proto.Retention, connectionID string) *proto.RetentionAck {
		ack := &proto.RetentionAck{ID: r.ID, ConnectionID: connectionID}
		for _, e := range r.Entries {
			ack.Entries = append(ack.Entries, proto.RetentionDecision{Generation: e.Generation, SpecificationDigest: e.SpecificationDigest, Keep: false})
		}
		return ack
	}

	// Core's connection ends before it answered; the node reconnects.
	conn.Close()
	<-a.Done()
	conn = w.core.Accept()
	b := conn.Auto(dep(2, d2, ptr64(2)), nil)
	b.HoldAcks(true)
	pending := b.NextHeld()
	b.Send(drop(first, first.ConnectionID))
	b.Send(drop(first, pending.ConnectionID))
	seen = 0
	b.WaitObservations(func([]proto.GenerationObservation) bool { seen++; return seen >= 5 })
	for _, r := range []genstate.Record{genstate.RecordJournal, genstate.RecordDropped} {
		if ok, _ := w.generations().Exists(1, r); ok {
			t.Fatalf("an answer of the old connection wrote %s", r)
		}
	}
	if pending.Entries[0].Generation != 1 {
		t.Fatalf("the new connection's retention %+v does not ask about generation 1", pending)
	}
	b.Send(drop(pending, pending.ConnectionID))
	w.untilReclaimed()
	w.reclaimed()
}

// A preparation that never published its configuration (the preparer
// died after the download) leaves a plan and its version files; Core
// rolls to another generation and lets this one go. The reclamation of
// such a generation knows its files only from the retained manifest, so
// a reclaimer killed just after it deleted manifest.json must not have
// left any other version file behind: a fresh authorisation after the
// restart finishes the reclamation instead of refusing for ever
// ("unknown file … in the version directory").
func TestCrashAfterTheManifestDeleteOfAPlannedGeneration(t *testing.T) {
	w := newGWorld(t)
	d1 := w.release(1, "rel-one")
	d2 := w.release(2, "rel-two")
	w.writeConfig(1, d1)
	w.interruptPreparation(preparer.CrashPrepareAfterDownload, d1)
	gens := w.generations()
	if _, err := gens.ReadPlan(1); err != nil {
		t.Fatalf("plan of the interrupted preparation: %v", err)
	}

	// Restart targeting 2; Core lets the planned generation 1 go once,
	// and the reclaimer dies right after deleting the manifest.
	p := w.start("SANDGATE_CRASHPOINT=" + preparer.CrashReclaimAfterManifestGone)
	a := w.core.Accept().Auto(dep(2, d2, nil), dropOneOnce())
	w.waitLog(p, `"msg":"preparer job ended","kind":"reclaim","generation":1,"ok":false`)
	w.kill(p)
	if _, err := os.Lstat(filepath.Join(gens.FilesPath(1), "manifest.json")); !os.IsNotExist(err) {
		t.Fatalf("the reclaimer did not get past the manifest: %v", err)
	}
	if ok, _ := gens.Exists(1, genstate.RecordJournal); !ok {
		t.Fatal("no reclamation journal after the interrupted reclamation")
	}

	// Restart: a fresh authorisation finishes the reclamation.
	p = w.start()
	a = w.core.Accept().Auto(dep(2, d2, nil), dropOne)
	w.waitLog(p, `"msg":"preparer job ended","kind":"reclaim","generation":1`)
	if !strings.Contains(p.output(), `"msg":"preparer job ended","kind":"reclaim","generation":1,"ok":true`) {
		t.Fatal("the reclamation of generation 1 did not finish after a fresh authorisation")
	}
	if _, err := gens.ReadDropped(1); err != nil {
		t.Fatalf("dropped marker: %v", err)
	}
	for _, r := range []genstate.Record{genstate.RecordJournal, genstate.RecordPlan} {
		if ok, _ := gens.Exists(1, r); ok {
			t.Fatalf("%s left behind", r)
		}
	}
	if _, err := os.Lstat(gens.FilesPath(1)); !os.IsNotExist(err) {
		t.Fatalf("version directory: %v", err)
	}
	if resp := w.create(a, 1, ref()); resp == nil || resp.ErrorCode != proto.ErrUnconfirmed {
		t.Fatalf("create on the dropped generation: %+v", resp)
	}
}

// A preparation interrupted right after its plan has no lease: its
// reclamation runs without one (no helper can have run). When that
// reclamation is interrupted after its journal, the generation is
// collecting — still without a lease — and a fresh authorisation after
// the restart must finish it, not refuse it for ever for the missing
// lease.
func TestCrashAfterTheJournalOfALeaselessReclamation(t *testing.T) {
	w := newGWorld(t)
	d1 := w.release(1, "rel-one")
	d2 := w.release(2, "rel-two")
	w.writeConfig(1, d1)
	w.interruptPreparation(preparer.CrashPrepareAfterPlan, d1)
	gens := w.generations()
	if _, err := os.Lstat(lease.Path(gens.Path(), 1)); !os.IsNotExist(err) {
		t.Fatalf("the interrupted preparation has a lease: %v", err)
	}

	// Restart targeting 2; Core lets 1 go once; the reclaimer dies right
	// after its journal.
	p := w.start("SANDGATE_CRASHPOINT=" + preparer.CrashReclaimAfterJournal)
	w.core.Accept().Auto(dep(2, d2, nil), dropOneOnce())
	w.waitLog(p, `"msg":"preparer job ended","kind":"reclaim","generation":1,"ok":false`)
	w.kill(p)
	if ok, _ := gens.Exists(1, genstate.RecordJournal); !ok {
		t.Fatal("no reclamation journal after the interrupted reclamation")
	}

	// Restart: a fresh authorisation finishes the reclamation.
	p = w.start()
	w.core.Accept().Auto(dep(2, d2, nil), dropOne)
	const ended, notStarted = `"msg":"preparer job ended","kind":"reclaim","generation":1`, `"msg":"reclamation not started: lease","generation":1`
	w.until("the reclamation of generation 1 ends or is not started", func() bool {
		return strings.Contains(p.output(), ended) || strings.Contains(p.output(), notStarted)
	})
	if !strings.Contains(p.output(), ended+`,"ok":true`) {
		t.Fatal("the reclamation of generation 1 did not finish after a fresh authorisation")
	}
	if _, err := gens.ReadDropped(1); err != nil {
		t.Fatalf("dropped marker: %v", err)
	}
	for _, r := range []genstate.Record{genstate.RecordJournal, genstate.RecordPlan} {
		if ok, _ := gens.Exists(1, r); ok {
			t.Fatalf("%s left behind", r)
		}
	}
	if _, err := os.Lstat(lease.Path(gens.Path(), 1)); !os.IsNotExist(err) {
		t.Fatalf("a lease appeared for the reclaimed generation: %v", err)
	}
}
