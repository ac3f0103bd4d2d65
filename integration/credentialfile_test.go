package integration

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/filewatch"
	"github.com/sandgate/sandgate/internal/scrapetest"
)

// TestCredentialFileDeleted: deleting the resource credential file of the
// built gateway revokes every credential once it has been missing for the
// grace (5 s), and the metrics say so (missing 1, stale > 0, entries 0);
// writing it back lets the token in again and clears the metrics.
func TestCredentialFileDeleted(t *testing.T) {
	e := startEnv(t)
	tok := e.mint(sbxOK, harness.Grant{CredentialID: credOK})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if r, err := e.listDir(ctx, tok); err != nil || r.status != http.StatusOK {
		t.Fatalf("baseline ListDir: %v status %d %s", err, r.status, r.body)
	}
	metrics := func() scrapetest.Samples {
		s, err := scrapetest.Get(testClient, "http://"+e.Admin+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	label := []string{"kind", "resource", "path", e.CredFile}
	if m := metrics(); m.Value("sandgate_credential_source_entries", label...) < 1 ||
		m.Value("sandgate_credential_source_stale_seconds", label...) != 0 ||
		m.Value("sandgate_credential_source_missing", label...) != 0 {
		t.Fatalf("metrics before: %s", m)
	}

	deleted := time.Now()
	if err := os.Remove(e.CredFile); err != nil {
		t.Fatal(err)
	}
	ok, probes := waitUntil(deleted.Add(filewatch.DefaultMissingGrace+5*time.Second), func(ctx context.Context) (bool, string) {
		r, err := e.listDir(ctx, tok)
		if err != nil {
			return false, err.Error()
		}
		return r.status == http.StatusUnauthorized && r.errorCode() == "CREDENTIAL_NOT_FOUND", http.StatusText(r.status) + " " + r.errorCode()
	})
	if !ok {
		t.Fatalf("the deleted file did not revoke the credential; probes: %s", probes)
	}
	if d := time.Since(deleted); d < filewatch.DefaultMissingGrace {
		t.Fatalf("revoked after %v, before the grace", d)
	}
	if m := metrics(); m.Value("sandgate_credential_source_entries", label...) != 0 ||
		m.Value("sandgate_credential_source_stale_seconds", label...) < filewatch.DefaultMissingGrace.Seconds() ||
		m.Value("sandgate_credential_source_missing", label...) != 1 {
		t.Fatalf("metrics while the file is missing: %s", m)
	}

	restored := e.writeCredentials(credentialsYAML("enabled"))
	ok, probes = waitUntil(restored.Add(waitLimit), func(ctx context.Context) (bool, string) {
		r, err := e.listDir(ctx, tok)
		if err != nil {
			return false, err.Error()
		}
		return r.status == http.StatusOK, http.StatusText(r.status) + " " + r.errorCode()
	})
	if !ok {
		t.Fatalf("the restored file did not let the token in; probes: %s", probes)
	}
	if m := metrics(); m.Value("sandgate_credential_source_entries", label...) < 1 ||
		m.Value("sandgate_credential_source_stale_seconds", label...) != 0 ||
		m.Value("sandgate_credential_source_missing", label...) != 0 {
		t.Fatalf("metrics after the restore: %s", m)
	}
}
