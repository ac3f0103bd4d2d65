package machineserver

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/node/machine"
)

// enrolBodyFor is enrolBody stating the generation the node previewed.
func enrolBodyFor(token string, g int64, digest string) string {
	return strings.TrimSuffix(enrolBody(token), "}") +
		fmt.Sprintf(`, "enrolled": {"deployment_generation": %d, "specification_digest": %q}}`, g, digest)
}

// TestEnrolmentChangedSincePreview: the operator flips the pool's serving
// generation between a node's preview and its enrolment. The node has
// downloaded and verified the previewed runtime only; Core must not
// register it with another one. The enrolment is refused (409
// enrolment_changed) before the token is used or anything is written, and
// the same token enrols the node with the new generation once it states
// that one (spec "Exact-match new installation": every refusal happens
// before the installer registers the node).
func TestEnrolmentChangedSincePreview(t *testing.T) {
	w := newWorld(t)
	tok := w.token("default")
	a := w.do(http.MethodGet, machine.EnrolPath, tok, nil, "")
	pv, err := machine.DecodeEnrolPreview(bytes.NewReader(a.body))
	if err != nil || pv.Enrolled.DeploymentGeneration != 7 {
		t.Fatalf("preview: %d %v %s", a.status, err, a.body)
	}
	// The operator serves generation 8 now.
	serving := int64(8)
	if _, err := w.pools.Set("default", 8, &serving, nil); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(w.enrolDir, "enrolment.json")
	before, _ := os.ReadFile(state)
	a = w.do(http.MethodPost, machine.EnrolPath, "", jsonCT, enrolBodyFor(tok, 7, pv.Enrolled.SpecificationDigest))
	if a.status != http.StatusConflict || a.errorCode() != machine.CodeEnrolmentChanged {
		t.Fatalf("enrol with the previewed generation after a flip: %d %s", a.status, a.body)
	}
	after, _ := os.ReadFile(state)
	if !bytes.Equal(before, after) || len(w.enrol.Records()) != 0 {
		t.Fatal("a refused enrolment registered a node")
	}
	if _, err := w.enrol.Check(tok); err != nil {
		t.Fatalf("the refused enrolment used the token: %v", err)
	}
	// A malformed statement is refused as such.
	a = w.do(http.MethodPost, machine.EnrolPath, "", jsonCT, enrolBodyFor(tok, 0, pv.Enrolled.SpecificationDigest))
	if a.status != http.StatusBadRequest || a.errorCode() != machine.CodeInvalidRequest {
		t.Fatalf("enrolled generation 0: %d %s", a.status, a.body)
	}
	// Stating what Core now enrols with succeeds, with the same token.
	a = w.do(http.MethodPost, machine.EnrolPath, "", jsonCT, enrolBodyFor(tok, 8, w.digests["rel-8"]))
	if a.status != http.StatusCreated {
		t.Fatalf("enrol with the current generation: %d %s", a.status, a.body)
	}
	er, err := machine.DecodeEnrolResponse(bytes.NewReader(a.body))
	if err != nil {
		t.Fatal(err)
	}
	w.secrets = append(w.secrets, er.Credential)
	if recs := w.enrol.Records(); len(recs) != 1 || recs[0].DeploymentGeneration != 8 || recs[0].SpecificationDigest != w.digests["rel-8"] {
		t.Fatalf("records %+v", recs)
	}
}
