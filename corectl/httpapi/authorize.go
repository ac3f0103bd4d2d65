package httpapi

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/httpapi/authzwire"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/internal/bearer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// authorize is GET /internal/v1/authorize?credential=<id>&sandbox=<id>,
// the gateway's sandbox authorizer (package gateway/authorizer has the
// contract). It is authenticated by Server.InternalToken (Authorization:
// Bearer), not by an API key, and answers from the manager's informer
// cache of BatchSandboxes (ClusterHandle.Cache), so it costs no apiserver
// round trip: 200 {"allowed": true, "endAt"} when the credential is
// enabled and sees the sandbox (credential.Credential.Sees) and the
// sandbox is neither being deleted nor expired and is serving (its
// lifecycle is not Creating, and lifecycle.PodServing); else 200
// {"allowed": false, "reason"}: not_found (no such sandbox, another
// credential's, or a credential that does not exist or is disabled),
// deleting, expired, not_ready. A not_ready answer is read again from
// the apiserver (ClusterHandle.Reader) first, within the credential's
// share (NotReadyRereadCredentialRate) of the cluster's
// ClusterHandle.NotReadyRereads: the cache may not yet hold the create's
// last write when the SDK's first call follows the 201.
// Any of InternalToken and InternalTokens is accepted; without any the
// route does not exist (404). Every question's handling time is
// recorded in corectl_authorize_duration_seconds (Server.Metrics).
//
// Without credential it is the Locate question of the gateway's host
// routing (a port request that carries no traffic token):
// GET /internal/v1/authorize?sandbox=<id> answers {"allowed": true,
// "cluster", "trafficTokenRequired"} for the one live sandbox of that ID
// in corectl's clusters (looked up in each cluster's cache), not_found
// when there is none or more than one, deleting or expired as above.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { s.Metrics.Authorized(time.Since(start)) }()
	accepted := s.internalTokens()
	if len(accepted) == 0 {
		s.fail(w, r, http.StatusNotFound, CodeNotFound, "no such route")
		return
	}
	tok, ok := bearer.FromRequest(r)
	if !ok || !oneOf(tok, accepted) {
		s.fail(w, r, http.StatusUnauthorized, CodeUnauthenticated, "the internal token is missing or wrong")
		return
	}
	q := authzwire.ParseQuery(r.URL.RawQuery)
	credID, id := q.Credential, q.Sandbox
	if q.Credentials == 0 && id != "" && q.Sandboxes == 1 {
		s.locate(w, r, id)
		return
	}
	if credID == "" || id == "" || q.Credentials != 1 || q.Sandboxes != 1 {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, "credential and sandbox are required, once each")
		return
	}
	refuse := func(reason authorizer.Reason) {
		authzwire.WriteAnswer(w, authorizer.Answer{Reason: reason}, time.Time{}, false)
	}
	cred, err := s.Credentials.Lookup(r.Context(), credID)
	switch {
	case errors.Is(err, credential.ErrNotFound), errors.Is(err, credential.ErrDisabled):
		refuse(authorizer.ReasonNotFound)
		return
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, "the credential source cannot answer")
		return
	}
	ch, ok := s.Clusters[cred.ClusterID]
	if !ok || ch.Cache == nil || sandbox.ValidateID(id) != nil {
		refuse(authorizer.ReasonNotFound)
		return
	}
	u := cachedPool.Get().(*sandbox.Cached)
	defer func() {
		*u = sandbox.Cached{}
		cachedPool.Put(u)
	}()
	ctx, cancel := requestContext(r)
	defer cancel()
	if err := ch.Cache.Get(ctx, client.ObjectKey{Namespace: cred.ProjectNamespace, Name: id}, u); err != nil {
		if apierrors.IsNotFound(err) {
			refuse(authorizer.ReasonNotFound)
			return
		}
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, "the sandbox cache cannot answer")
		return
	}
	a, end, hasEnd := s.answer(cred, u)
	if a.Reason == authorizer.ReasonNotReady && ch.Reader != nil && ch.allowReread(cred.ID) {
		// The cache may not yet hold the create's last write (lifecycle
		// Ready) when the SDK's first call follows its 201 at once, or
		// when this replica's cache lags the one that answered the
		// create: a not-ready answer is read again from the apiserver.
		// The gateway keeps each answer for at most a second, so this
		// read happens at most about once a second per sandbox and
		// gateway replica, and only for a sandbox the credential owns;
		// the cluster's re-reads together are bounded by
		// NotReadyRereads (a tenant can keep many sandboxes not ready)
		// and each credential's by its share of them, past which the
		// cache's answer stands.
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(sandbox.GVK)
		if err := ch.Reader.Get(ctx, client.ObjectKey{Namespace: cred.ProjectNamespace, Name: id}, live); err == nil {
			a, end, hasEnd = s.answer(cred, live)
		} else if apierrors.IsNotFound(err) {
			a = authorizer.Answer{Reason: authorizer.ReasonNotFound}
		}
	}
	authzwire.WriteAnswer(w, a, end, hasEnd)
}

// cachedPool holds the authorizer's read targets: the cache copies a
// BatchSandbox's fields into one (sharing its maps, which nothing here
// writes), and it is cleared before it is put back.
var cachedPool = sync.Pool{New: func() any { return sandbox.NewCached() }}

// answer is the authorizer's answer for credential cred about
// BatchSandbox u (the cache's or the apiserver's copy): not_found for
// another credential's, deleting, expired, not_ready while it is Creating
// or its pod does not serve (spec §3.3 "running", §5.3 Creating and
// PodUnavailable: the data plane answers SANDBOX_NOT_READY, as the fixed
// entry's ingress would), else allowed; end and hasEnd are the sandbox's
// end time (authzwire.WriteAnswer writes it as the allowed answer's endAt).
func (s *Server) answer(cred credential.Credential, u client.Object) (a authorizer.Answer, end time.Time, hasEnd bool) {
	st, _ := sandbox.Annotation(u, v1alpha1.AnnotationLifecycle)
	end, hasEnd = lifecycle.EndAt(u)
	switch {
	case !cred.Sees(sandbox.OwnerOf(u), cred.ProjectNamespace, cred.ClusterID):
		return authorizer.Answer{Reason: authorizer.ReasonNotFound}, end, hasEnd
	case u.GetDeletionTimestamp() != nil || st == v1alpha1.StateDeleting || st == v1alpha1.StateCleanupFailed:
		return authorizer.Answer{Reason: authorizer.ReasonDeleting}, end, hasEnd
	case hasEnd && !time.Now().Before(end):
		return authorizer.Answer{Reason: authorizer.ReasonExpired}, end, hasEnd
	case st == lifecycle.StateCreating || !lifecycle.PodServing(u):
		return authorizer.Answer{Reason: authorizer.ReasonNotReady}, end, hasEnd
	}
	return authorizer.Answer{Allowed: true}, end, hasEnd
}

// internalTokens is InternalToken and InternalTokens without empty ones.
func (s *Server) internalTokens() []string {
	out := make([]string, 0, 1+len(s.InternalTokens))
	for _, t := range append([]string{s.InternalToken}, s.InternalTokens...) {
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// oneOf reports whether tok is one of accepted, comparing each in
// constant time.
func oneOf(tok string, accepted []string) bool {
	match := 0
	for _, a := range accepted {
		match |= subtle.ConstantTimeCompare([]byte(tok), []byte(a))
	}
	return match == 1
}
