package preparer

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/release"
	"github.com/sandgate/sandgate/nodeagent/docker"
	"github.com/sandgate/sandgate/nodeagent/generation"
	"github.com/sandgate/sandgate/nodeagent/genstate"
	"github.com/sandgate/sandgate/nodeagent/lease"
	"github.com/sandgate/sandgate/nodeagent/machineclient"
)

// The exit status is the preparer's whole report: every class maps to one
// outcome, and the node never looks at stderr.
func TestExitCodesAndOutcomes(t *testing.T) {
	cases := []struct {
		err  error
		exit int
		out  generation.Outcome
	}{
		{nil, ExitOK, generation.Outcome{OK: true}},
		{fmt.Errorf("x: %w", machineclient.ErrTransfer), ExitDownload, generation.Outcome{Diagnostic: proto.DiagRuntimeDownloadFailed}},
		// A rejected credential and an unknown generation are not
		// download failures.
		{machineclient.ErrRefused, ExitCredentialRejected, generation.Outcome{Diagnostic: proto.DiagCredentialRejected}},
		{fmt.Errorf("config: %w", machineclient.ErrGenerationUnknown), ExitGenerationUnknown, generation.Outcome{Diagnostic: proto.DiagGenerationUnknown}},
		{release.ErrDigestMismatch, ExitDownload, generation.Outcome{Diagnostic: proto.DiagRuntimeDownloadFailed}},
		{fmt.Errorf("artifact a: %w", release.ErrChecksum), ExitDownload, generation.Outcome{Diagnostic: proto.DiagRuntimeDownloadFailed}},
		{&failure{exit: ExitConfigMissing, err: errors.New("no config")}, ExitConfigMissing, generation.Outcome{Refused: true, Diagnostic: proto.DiagProviderConfigMissing}},
		{refuse("conflict"), ExitRefused, generation.Outcome{Refused: true, Diagnostic: proto.DiagProviderUnavailable}},
		{lease.ErrIdentityMissing, ExitRefused, generation.Outcome{Refused: true, Diagnostic: proto.DiagProviderUnavailable}},
		{lease.ErrReplaced, ExitRefused, generation.Outcome{Refused: true, Diagnostic: proto.DiagProviderUnavailable}},
		{genstate.ErrMismatch, ExitRefused, generation.Outcome{Refused: true, Diagnostic: proto.DiagProviderUnavailable}},
		{docker.ErrImportMismatch, ExitRefused, generation.Outcome{Refused: true, Diagnostic: proto.DiagProviderUnavailable}},
		{lease.ErrBusy, ExitBusy, generation.Outcome{Busy: true}},
		{syscall.ENOSPC, exitForDiagnostic(proto.DiagStorageFull), generation.Outcome{Diagnostic: proto.DiagStorageFull}},
		{errors.New("something else"), exitForDiagnostic(proto.DiagProviderUnavailable), generation.Outcome{Diagnostic: proto.DiagProviderUnavailable}},
	}
	for _, c := range cases {
		exit := ExitCode(c.err, nil)
		if exit != c.exit {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, exit, c.exit)
		}
		if got := outcomeOfStatus(exit); got != c.out {
			t.Errorf("outcome of exit %d = %+v, want %+v", exit, got, c.out)
		}
	}
	for i, d := range providerFaults {
		if got := outcomeOfStatus(ExitProvider + i); got.Diagnostic != d || got.OK || got.Refused || got.Busy {
			t.Errorf("exit %d → %+v, want %s", ExitProvider+i, got, d)
		}
	}
	if got := outcomeOfStatus(200); got.Diagnostic != proto.DiagProviderUnavailable {
		t.Errorf("an unknown status → %+v", got)
	}
}

func TestKilledPreparerIsAnUnclassifiedFault(t *testing.T) {
	cmd := exec.Command("sh", "-c", "kill -9 $$")
	err := cmd.Run()
	if got := OutcomeOf(err); got.OK || got.Busy || got.Refused || got.Diagnostic != proto.DiagProviderUnavailable {
		t.Fatalf("OutcomeOf(killed) = %+v", got)
	}
	err = exec.Command("sh", "-c", "exit 64").Run()
	if got := OutcomeOf(err); got.Diagnostic != proto.DiagRuntimeDownloadFailed {
		t.Fatalf("OutcomeOf(exit 64) = %+v", got)
	}
}
