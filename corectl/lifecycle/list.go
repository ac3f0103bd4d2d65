package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/pagetoken"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/credential"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Listed is one entry of the list routes: E2B's ListedSandbox.
type Listed struct {
	// TemplateID, SandboxID, ClientID, StartedAt, EndAt, CPUCount,
	// MemoryMB, DiskSizeMB, Metadata, State and EnvdVersion are as in
	// Info.
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   string            `json:"startedAt"`
	EndAt       string            `json:"endAt"`
	CPUCount    int32             `json:"cpuCount"`
	MemoryMB    int32             `json:"memoryMB"`
	DiskSizeMB  int32             `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`

	start time.Time
}

// ListQuery selects and pages the list routes' sandboxes (E2B's GET
// /v2/sandboxes parameters).
type ListQuery struct {
	// Metadata keeps sandboxes whose metadata has every pair.
	Metadata map[string]string
	// States are E2B SandboxStates ("running", "paused"); empty: all.
	// Every listed sandbox is running.
	States []string
	// Template keeps sandboxes of this template ID ("" = any).
	Template string
	// StartedAfter keeps sandboxes started at or after it (zero: any).
	StartedAfter time.Time
	// Ascending orders by start time oldest first (default newest
	// first); the sandbox ID breaks ties.
	Ascending bool
	// Limit is the page size, 1 to MaxListLimit (0: MaxListLimit).
	Limit int
	// NextToken continues after the page that returned it ("" = first
	// page).
	NextToken string
	// All answers every matching sandbox on one page, Limit ignored and no
	// NextToken (E2B's v1 list): one pass, where paging through them
	// would filter and sort the whole set once per page.
	All bool
}

// MaxListLimit is E2B's largest page (paginationLimit maximum 100, also
// its default).
const MaxListLimit = 100

// ErrBadToken: a NextToken that this corectl did not issue (the same
// error as pagetoken.ErrInvalid).
var ErrBadToken = pagetoken.ErrInvalid

// ListPage is one page of List.
type ListPage struct {
	// Items are the page's sandboxes.
	Items []Listed
	// NextToken continues the list; "" on the last page.
	NextToken string
	// Total is how many sandboxes matched the filters before paging.
	Total int
}

// List returns the sandboxes of namespace ns that cred sees
// (credential.Credential.Sees), that are not expired or being deleted,
// filtered and paged by q. A credential that is not project-wide lists
// by its owner label (v1alpha1.LabelCredential) and every entry's owner
// annotation is checked again. With Cache set, the BatchSandboxes are read
// from it (by sandbox.IndexCredential, without copies), else from the
// apiserver. Only the page's entries are described (their sizes parsed
// from the pod template); the filters and the order read the object's
// metadata. Errors: ErrBadToken, ErrUnavailable.
func (o *Orchestrator) List(ctx context.Context, cred credential.Credential, ns string, q ListQuery) (*ListPage, error) {
	after, err := decodeToken(q.NextToken)
	if err != nil {
		return nil, err
	}
	objs, err := o.listSandboxes(ctx, cred, ns)
	if err != nil {
		return nil, fmt.Errorf("%w: list BatchSandboxes: %s", ErrUnavailable, err.Error())
	}
	running := len(q.States) == 0 || slices.Contains(q.States, "running")
	type entry struct {
		u     client.Object
		id    string
		start time.Time
	}
	var items []entry
	for _, u := range objs {
		if u.GetLabels()[v1alpha1.LabelClusterID] != o.Cluster.ID {
			continue
		}
		ann := u.GetAnnotations()
		st := ann[v1alpha1.AnnotationLifecycle]
		if !running || !cred.Sees(sandbox.OwnerOf(u), ns, o.Cluster.ID) || o.expired(u) ||
			u.GetDeletionTimestamp() != nil || st == StateDeleting || st == StateCleanupFailed {
			continue
		}
		start := u.GetCreationTimestamp().Time
		if q.Template != "" && ann[AnnotationTemplateID] != q.Template || !q.StartedAfter.IsZero() && start.Before(q.StartedAfter.Truncate(time.Second)) {
			continue
		}
		if len(q.Metadata) > 0 && !hasAll(Metadata(u), q.Metadata) {
			continue
		}
		items = append(items, entry{u: u, id: u.GetName(), start: start})
	}
	// By start time, then sandbox ID (starts have whole seconds), both in
	// the requested direction.
	less := func(aStart time.Time, aID string, bStart time.Time, bID string) int {
		c := aStart.Compare(bStart)
		if c == 0 {
			c = strings.Compare(aID, bID)
		}
		if q.Ascending {
			return c
		}
		return -c
	}
	slices.SortFunc(items, func(a, b entry) int { return less(a.start, a.id, b.start, b.id) })
	page := &ListPage{Total: len(items)}
	if after != nil {
		i, _ := slices.BinarySearchFunc(items, *after, func(a entry, cur Listed) int { return less(a.start, a.id, cur.start, cur.SandboxID) })
		if i < len(items) && items[i].id == after.SandboxID {
			i++
		}
		items = items[i:]
	}
	limit := q.Limit
	if limit <= 0 || limit > MaxListLimit {
		limit = MaxListLimit
	}
	if q.All {
		limit = len(items)
	}
	more := len(items) > limit
	if more {
		items = items[:limit]
	}
	page.Items = make([]Listed, 0, len(items))
	for _, e := range items {
		d := o.describe(e.u)
		page.Items = append(page.Items, Listed{TemplateID: d.TemplateID, SandboxID: d.SandboxID, ClientID: d.ClientID, StartedAt: d.StartedAt,
			EndAt: d.EndAt, CPUCount: d.CPUCount, MemoryMB: d.MemoryMB, DiskSizeMB: d.DiskSizeMB, Metadata: d.Metadata,
			State: d.State, EnvdVersion: d.EnvdVersion, start: d.start})
	}
	if more {
		page.NextToken = encodeToken(page.Items[limit-1])
	}
	return page, nil
}

// listSandboxes reads the managed BatchSandboxes of namespace ns that
// cred may see: all of the namespace for a project-wide credential, else
// those labelled with its credential label. From Cache when set, as
// *sandbox.Cached (the objects are the cache's own: read only), else from
// the apiserver, whole.
func (o *Orchestrator) listSandboxes(ctx context.Context, cred credential.Credential, ns string) ([]client.Object, error) {
	sel := client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: o.Cluster.ID}
	if o.Cache != nil {
		var list sandbox.CachedList
		var err error
		if !cred.ProjectWide {
			err = o.Cache.List(ctx, &list, client.UnsafeDisableDeepCopy,
				client.MatchingFields{sandbox.IndexCredential: sandbox.CredentialIndexKey(ns, sandbox.CredentialLabelValue(cred.ID))})
		} else {
			err = o.Cache.List(ctx, &list, client.UnsafeDisableDeepCopy, client.InNamespace(ns), sel)
		}
		if err != nil {
			return nil, err
		}
		out := make([]client.Object, 0, len(list.Items))
		for _, c := range list.Items {
			out = append(out, c)
		}
		return out, nil
	}
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
	if !cred.ProjectWide {
		sel[v1alpha1.LabelCredential] = sandbox.CredentialLabelValue(cred.ID)
	}
	if err := o.Client.List(ctx, &list, client.InNamespace(ns), sel); err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// encodeToken is the cursor after l (package pagetoken).
func encodeToken(l Listed) string { return pagetoken.Encode(l.start, l.SandboxID) }

// decodeToken reads a cursor; nil for "". The error wraps ErrBadToken.
func decodeToken(tok string) (*Listed, error) {
	if tok == "" {
		return nil, nil
	}
	at, id, err := pagetoken.Decode(tok)
	if err != nil {
		return nil, err
	}
	return &Listed{SandboxID: id, start: at}, nil
}
