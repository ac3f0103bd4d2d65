package httpapi

import (
	"net/http"
	"sort"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// IndexSandboxName is the field index of the BatchSandbox cache by
// object name, across namespaces, that the Locate question reads; the
// daemon registers it on every cluster's cache (ClusterHandle.Cache).
const IndexSandboxName = "sandgate.name"

// locate answers the authorizer's Locate question for sandbox id (see
// authorize): the sandbox is looked up by name (IndexSandboxName) in every
// cluster's cache of the BatchSandboxes corectl manages. Sandbox IDs are
// random (lifecycle.NewID), so two matches mean something is wrong and
// are answered not_found. A cluster whose cache has not synced yet
// (ClusterHandle.CacheSynced: its apiserver has not answered since
// corectl started) is left out: its reads would wait for a sync that may
// not come, or fail, and with them the answer about every other
// cluster's sandboxes. When no other cluster has the sandbox, the answer
// is 503 unavailable (it may be in the one left out), not not_found. The
// gateway caches the answer (about a second).
func (s *Server) locate(w http.ResponseWriter, r *http.Request, id string) {
	refuse := func(reason authorizer.Reason) {
		writeJSON(w, http.StatusOK, authorizer.Answer{Reason: reason})
	}
	if sandbox.ValidateID(id) != nil {
		refuse(authorizer.ReasonNotFound)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	var (
		found   *sandbox.Cached
		cluster string
		matches int
		skipped int
	)
	ids := make([]string, 0, len(s.Clusters))
	for cid := range s.Clusters {
		ids = append(ids, cid)
	}
	sort.Strings(ids)
	for _, cid := range ids {
		ch := s.Clusters[cid]
		if ch.Cache == nil {
			continue
		}
		if ch.CacheSynced != nil && !ch.CacheSynced() {
			skipped++
			continue
		}
		var list sandbox.CachedList
		if err := ch.Cache.List(ctx, &list, client.UnsafeDisableDeepCopy, client.MatchingFields{IndexSandboxName: id}); err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, "the sandbox cache cannot answer")
			return
		}
		for i := range list.Items {
			if list.Items[i].GetName() == id {
				matches++
				found, cluster = list.Items[i], cid
			}
		}
	}
	if matches == 0 && skipped > 0 {
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, "a cluster's sandbox cache has not synced yet")
		return
	}
	if matches != 1 {
		refuse(authorizer.ReasonNotFound)
		return
	}
	st, _ := sandbox.Annotation(found, v1alpha1.AnnotationLifecycle)
	end, hasEnd := lifecycle.EndAt(found)
	switch {
	case found.GetDeletionTimestamp() != nil || st == v1alpha1.StateDeleting || st == v1alpha1.StateCleanupFailed:
		refuse(authorizer.ReasonDeleting)
	case hasEnd && !time.Now().Before(end):
		refuse(authorizer.ReasonExpired)
	default:
		a := authorizer.Answer{Allowed: true, Cluster: cluster,
			TrafficTokenRequired: trafficToken(found) == lifecycle.TrafficTokenRequired}
		if hasEnd {
			a.EndAt = end.UTC().Format(time.RFC3339Nano)
		}
		writeJSON(w, http.StatusOK, a)
	}
}

// trafficToken is found's lifecycle.AnnotationTrafficToken.
func trafficToken(found *sandbox.Cached) string {
	v, _ := sandbox.Annotation(found, lifecycle.AnnotationTrafficToken)
	return v
}
