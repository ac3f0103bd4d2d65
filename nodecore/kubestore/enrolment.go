package kubestore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandgate/sandgate/internal/ttlcache"
	"github.com/sandgate/sandgate/node/proto"
	v1 "github.com/sandgate/sandgate/nodecore/apis/v1alpha1"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/enrolment"
)

// Bounds of the reads of what the view does not know.
const (
	// missTTL is how long a node ID that the apiserver did not have is
	// answered unknown without another read.
	missTTL = 30 * time.Second
	// maxMisses bounds those remembered node IDs.
	maxMisses = 10000
	// maxPrune bounds the expired tokens one Issue deletes.
	maxPrune = 64
)

// Enrolment is the enrolment store over NodeEnrolmentToken and
// EnrolledNode objects: credential.Store (and credential.Refresher) for
// the node connection, the machine API's Enroller and the admin API's
// Enrolments (the methods of nodecore/enrolment's Store, with the same
// errors).
//
// A token's single use is an update of its NodeEnrolmentToken
// conditional on the resourceVersion read (of two replicas enrolling with
// one token at once, exactly one update succeeds); the node's EnrolledNode
// is created next, and when that fails the token is given back by an
// update conditional on the use's version. A crash between the two
// writes leaves the token used and no node (the operator issues another
// token); a node is never told a credential that is not stored.
type Enrolment struct {
	s      *Store
	tokens *mirror[tokenView]
	nodes  *mirror[nodeView]
	misses *ttlcache.Cache[bool]
}

type tokenView struct {
	name    string
	pool    string
	expires time.Time
	used    bool
}

type nodeView struct {
	node   credential.Node
	digest credential.Digest
	rec    enrolment.Record
}

func newEnrolment(s *Store) *Enrolment {
	e := &Enrolment{s: s, tokens: newMirror[tokenView](), nodes: newMirror[nodeView](), misses: ttlcache.New[bool](maxMisses)}
	_, _ = s.tokenInformer.AddEventHandler(handlers(func(t *v1.NodeEnrolmentToken) {
		e.tokens.put(t.Name, t.ResourceVersion, tokenOf(t))
	}, func(t *v1.NodeEnrolmentToken) { e.tokens.remove(t.Name, t.ResourceVersion) }))
	_, _ = s.nodeInformer.AddEventHandler(handlers(func(n *v1.EnrolledNode) { e.putNode(n) },
		func(n *v1.EnrolledNode) { e.nodes.remove(n.Name, n.ResourceVersion) }))
	return e
}

func tokenOf(t *v1.NodeEnrolmentToken) tokenView {
	return tokenView{name: t.Name, pool: t.Spec.Pool, expires: t.Spec.ExpiresAt.Time, used: t.Status.UsedAt != nil}
}

// putNode installs an EnrolledNode in the view; a malformed one is left
// out and logged.
func (e *Enrolment) putNode(n *v1.EnrolledNode) {
	d, err := credential.ParseDigest(n.Spec.CredentialSHA256)
	if err != nil || !proto.IsUUID(n.Name) {
		e.s.cfg.Logger.Warn("an EnrolledNode object is malformed and is left out", zap.String("node_id", n.Name))
		return
	}
	sp := n.Spec
	e.nodes.put(n.Name, n.ResourceVersion, nodeView{digest: d,
		node: credential.Node{NodeID: n.Name, Enabled: sp.Enabled, InstallationID: sp.InstallationID, Provider: sp.Provider,
			BackendFingerprint: sp.BackendFingerprint, DeploymentGeneration: sp.DeploymentGeneration,
			SpecificationDigest: sp.SpecificationDigest, GenerationManagement: sp.GenerationManagement, Pool: sp.Pool},
		rec: enrolment.Record{NodeID: n.Name, Enabled: sp.Enabled, Pool: sp.Pool, InstallationID: sp.InstallationID,
			Provider: sp.Provider, BackendFingerprint: sp.BackendFingerprint, DeploymentGeneration: sp.DeploymentGeneration,
			SpecificationDigest: sp.SpecificationDigest, GenerationManagement: sp.GenerationManagement,
			MaxActive: sp.MaxActive, MaxRetained: sp.MaxRetained, EnrolledAt: sp.EnrolledAt.UTC()}})
}

func stateErr(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", enrolment.ErrState, what, err)
}

// Issue creates a one-time enrolment token for pool, valid for ttl (0:
// enrolment.DefaultTTL). Its NodeEnrolmentToken (the token's SHA-256, the
// pool, the expiry) is created before Issue returns the token, shown this
// once; expired tokens are deleted. Errors: enrolment.ErrInvalid,
// enrolment.ErrState.
func (e *Enrolment) Issue(poolName string, ttl time.Duration) (string, time.Time, error) {
	ttl, err := enrolment.IssueTTL(poolName, ttl)
	if err != nil {
		return "", time.Time{}, err
	}
	token, err := enrolment.NewSecret()
	if err != nil {
		return "", time.Time{}, err
	}
	d, _ := enrolment.TokenDigest(token)
	now := e.s.cfg.Now().UTC()
	expires := now.Add(ttl).Truncate(time.Second)
	t := &v1.NodeEnrolmentToken{ObjectMeta: metav1.ObjectMeta{Name: d, Namespace: e.s.cfg.Namespace, Labels: labels(poolName)},
		Spec: v1.NodeEnrolmentTokenSpec{Pool: poolName, ExpiresAt: metav1.NewTime(expires)}}
	ctx, cancel := e.s.request()
	defer cancel()
	if err := e.s.client.Create(ctx, t); err != nil {
		return "", time.Time{}, stateErr("creating the enrolment token", err)
	}
	e.tokens.put(t.Name, t.ResourceVersion, tokenOf(t))
	e.prune(ctx, now)
	return token, expires, nil
}

// prune deletes expired tokens (an expired token is refused whether it is
// stored or not), conditionally on their version; failures are left for
// the next Issue.
func (e *Enrolment) prune(ctx context.Context, now time.Time) {
	n := 0
	for _, t := range e.tokens.values() {
		if now.Before(t.expires) || n >= maxPrune {
			continue
		}
		n++
		_, rv, ok := e.tokens.get(t.name)
		if !ok {
			continue
		}
		err := e.s.client.Delete(ctx, &v1.NodeEnrolmentToken{ObjectMeta: metav1.ObjectMeta{Name: t.name, Namespace: e.s.cfg.Namespace}},
			client.Preconditions{ResourceVersion: &rv})
		if err == nil || apierrors.IsNotFound(err) {
			e.tokens.remove(t.name, rv)
		}
	}
}

// token returns a token's view, reading it from the apiserver when the
// view does not have it (issued through another replica a moment ago;
// rate-limited).
func (e *Enrolment) token(d string) (tokenView, bool) {
	if t, _, ok := e.tokens.get(d); ok {
		return t, true
	}
	if !e.s.refresh.TryAccept() {
		return tokenView{}, false
	}
	ctx, cancel := e.s.request()
	defer cancel()
	var t v1.NodeEnrolmentToken
	if err := e.s.client.Get(ctx, client.ObjectKey{Namespace: e.s.cfg.Namespace, Name: d}, &t); err != nil {
		return tokenView{}, false
	}
	e.tokens.put(t.Name, t.ResourceVersion, tokenOf(&t))
	return tokenOf(&t), true
}

// usable reports whether a token may be used at now.
func usable(t tokenView, now time.Time) bool { return !t.used && now.Before(t.expires) }

// Check returns the pool of a usable token (known, unused, unexpired)
// without using it, or enrolment.ErrRefused.
func (e *Enrolment) Check(token string) (string, error) {
	d, ok := enrolment.TokenDigest(token)
	if !ok {
		return "", enrolment.ErrRefused
	}
	t, ok := e.token(d)
	if !ok || !usable(t, e.s.cfg.Now()) {
		return "", enrolment.ErrRefused
	}
	return t.pool, nil
}

// Enrol uses token once and enrols a new node: the token's
// NodeEnrolmentToken is read from the apiserver, marked used by an update
// conditional on the version read, and the node's EnrolledNode (with the
// SHA-256 of a new random credential) is created, all before Enrol
// returns. resolve gives the generation a new node of the token's pool is
// enrolled with; its error is returned as is and uses nothing. Errors:
// enrolment.ErrRefused (unknown, used or expired token, or another
// enrolment used it first), enrolment.ErrInvalid, resolve's error,
// enrolment.ErrState (the token is then as it was, unless giving it back
// failed too: see Enrolment).
func (e *Enrolment) Enrol(token string, r enrolment.Request, resolve func(pool string) (enrolment.Generation, error)) (*enrolment.Enrolled, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	d, ok := enrolment.TokenDigest(token)
	if !ok {
		return nil, enrolment.ErrRefused
	}
	for attempt := 1; attempt <= maxWriteAttempts; attempt++ {
		res, retry, err := e.enrol(d, r, resolve)
		if !retry {
			return res, err
		}
	}
	return nil, fmt.Errorf("%w: the enrolment token changed %d times during one enrolment", enrolment.ErrState, maxWriteAttempts)
}

// enrol is one attempt of Enrol; retry says the token changed between its
// read and its use.
func (e *Enrolment) enrol(d string, r enrolment.Request, resolve func(pool string) (enrolment.Generation, error)) (*enrolment.Enrolled, bool, error) {
	ctx, cancel := e.s.request()
	defer cancel()
	var t v1.NodeEnrolmentToken
	err := e.s.client.Get(ctx, client.ObjectKey{Namespace: e.s.cfg.Namespace, Name: d}, &t)
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, enrolment.ErrRefused
	case err != nil:
		return nil, false, stateErr("reading the enrolment token", err)
	}
	e.tokens.put(t.Name, t.ResourceVersion, tokenOf(&t))
	now := e.s.cfg.Now().UTC()
	if !usable(tokenOf(&t), now) {
		return nil, false, enrolment.ErrRefused
	}
	gen, err := resolve(t.Spec.Pool)
	if err != nil {
		return nil, false, err
	}
	secret, err := enrolment.NewSecret()
	if err != nil {
		return nil, false, err
	}
	nodeID := uuid.NewString()
	at := metav1.NewTime(now.Truncate(time.Second))
	used := t.DeepCopy()
	used.Status = v1.NodeEnrolmentTokenStatus{UsedAt: &at, NodeID: nodeID}
	if err := e.s.client.Update(ctx, used); err != nil {
		if conflict(err) {
			return nil, true, nil
		}
		return nil, false, stateErr("using the enrolment token", err)
	}
	digest := credential.Sum(secret)
	n := &v1.EnrolledNode{ObjectMeta: metav1.ObjectMeta{Name: nodeID, Namespace: e.s.cfg.Namespace, Labels: labels(t.Spec.Pool)},
		Spec: v1.EnrolledNodeSpec{Enabled: true, Pool: t.Spec.Pool, CredentialSHA256: fmt.Sprintf("%x", digest[:]),
			InstallationID: r.InstallationID, Provider: string(r.Provider), BackendFingerprint: r.BackendFingerprint,
			DeploymentGeneration: gen.Generation, SpecificationDigest: gen.SpecificationDigest,
			GenerationManagement: r.GenerationManagement, MaxActive: r.MaxActive, MaxRetained: r.MaxRetained, EnrolledAt: at}}
	if err := e.s.client.Create(ctx, n); err != nil {
		// Give the token back, conditionally on the version of its use.
		back := used.DeepCopy()
		back.Status = t.Status
		bctx, bcancel := e.s.request()
		defer bcancel()
		if berr := e.s.client.Update(bctx, back); berr != nil {
			e.s.cfg.Logger.Error("an enrolment failed after its token was used, and the token could not be given back: issue a new token",
				zap.String("token_sha256", d), zap.String("pool", t.Spec.Pool), zap.Error(berr))
			e.tokens.put(used.Name, used.ResourceVersion, tokenOf(used))
		} else {
			e.tokens.put(back.Name, back.ResourceVersion, tokenOf(back))
		}
		return nil, false, stateErr("creating the enrolled node", err)
	}
	e.tokens.put(used.Name, used.ResourceVersion, tokenOf(used))
	e.putNode(n)
	v, _, _ := e.nodes.get(nodeID)
	return &enrolment.Enrolled{Node: v.node, Credential: secret}, false, nil
}

// Authenticate implements credential.Store from the view.
func (e *Enrolment) Authenticate(nodeID string, digest credential.Digest) (credential.Node, error) {
	v, _, ok := e.nodes.get(nodeID)
	if !ok {
		return credential.Check(nodeID, nil, credential.Digest{}, digest)
	}
	return credential.Check(nodeID, &v.node, v.digest, digest)
}

// Refresh implements credential.Refresher: a node ID the view does not
// know is read from the apiserver (rate-limited by Config.RefreshQPS; one
// read at a time per node ID; a node ID the apiserver does not have is
// answered unknown for 30 s without another read).
func (e *Enrolment) Refresh(nodeID string, digest credential.Digest) (credential.Node, error) {
	if _, _, ok := e.nodes.get(nodeID); !ok && proto.IsUUID(nodeID) {
		ctx, cancel := e.s.request()
		_, _ = e.misses.Get(ctx, nodeID, func(ctx context.Context) (bool, time.Time) {
			if !e.s.refresh.TryAccept() {
				return false, time.Time{}
			}
			ctx, cancel := context.WithTimeout(ctx, e.s.cfg.RequestTimeout)
			defer cancel()
			var n v1.EnrolledNode
			err := e.s.client.Get(ctx, client.ObjectKey{Namespace: e.s.cfg.Namespace, Name: nodeID}, &n)
			switch {
			case err == nil:
				e.putNode(&n)
				return true, time.Time{}
			case apierrors.IsNotFound(err):
				return false, time.Now().Add(missTTL)
			default:
				return false, time.Time{}
			}
		})
		cancel()
	}
	return e.Authenticate(nodeID, digest)
}

// Find implements credential.Finder from the view: nodeID's enrolment
// (enabled or not), without listing every node.
func (e *Enrolment) Find(nodeID string) (credential.Node, bool) {
	v, _, ok := e.nodes.get(nodeID)
	return v.node, ok
}

// Nodes implements credential.Store: every enrolled node in the view,
// sorted by node ID.
func (e *Enrolment) Nodes() []credential.Node {
	vs := e.nodes.values()
	out := make([]credential.Node, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.node)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// Records returns the enrolled nodes in the view, sorted by node ID.
func (e *Enrolment) Records() []enrolment.Record {
	vs := e.nodes.values()
	out := make([]enrolment.Record, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// SetEnabled enables or disables an enrolled node: an update of its
// EnrolledNode conditional on the version read from the apiserver,
// before it takes effect. It reports whether the node exists. Errors:
// enrolment.ErrState (nothing changed).
func (e *Enrolment) SetEnabled(nodeID string, enabled bool) (bool, error) {
	for attempt := 1; attempt <= maxWriteAttempts; attempt++ {
		n, found, err := e.read(nodeID)
		if !found || err != nil {
			return found, err
		}
		if n.Spec.Enabled == enabled {
			return true, nil
		}
		n.Spec.Enabled = enabled
		ctx, cancel := e.s.request()
		err = e.s.client.Update(ctx, n)
		cancel()
		switch {
		case err == nil:
			e.putNode(n)
			return true, nil
		case !conflict(err):
			return true, stateErr("updating the enrolled node", err)
		}
	}
	return true, fmt.Errorf("%w: the enrolled node changed %d times during one update", enrolment.ErrState, maxWriteAttempts)
}

// Remove deletes an enrolled node's EnrolledNode (conditionally on the
// version read): its credential no longer authenticates. It reports
// whether the node existed. Errors: enrolment.ErrState (nothing changed).
func (e *Enrolment) Remove(nodeID string) (bool, error) {
	for attempt := 1; attempt <= maxWriteAttempts; attempt++ {
		n, found, err := e.read(nodeID)
		if !found || err != nil {
			return found, err
		}
		rv := n.ResourceVersion
		ctx, cancel := e.s.request()
		err = e.s.client.Delete(ctx, n, client.Preconditions{ResourceVersion: &rv, UID: &n.UID})
		cancel()
		switch {
		case err == nil:
			e.nodes.remove(nodeID, rv)
			return true, nil
		case apierrors.IsNotFound(err):
			e.nodes.remove(nodeID, "")
			return false, nil
		case !conflict(err):
			return true, stateErr("deleting the enrolled node", err)
		}
	}
	return true, fmt.Errorf("%w: the enrolled node changed %d times during one removal", enrolment.ErrState, maxWriteAttempts)
}

// read reads an EnrolledNode from the apiserver into the view.
func (e *Enrolment) read(nodeID string) (*v1.EnrolledNode, bool, error) {
	if !proto.IsUUID(nodeID) {
		return nil, false, nil
	}
	ctx, cancel := e.s.request()
	defer cancel()
	var n v1.EnrolledNode
	err := e.s.client.Get(ctx, client.ObjectKey{Namespace: e.s.cfg.Namespace, Name: nodeID}, &n)
	switch {
	case apierrors.IsNotFound(err):
		e.nodes.remove(nodeID, "")
		return nil, false, nil
	case err != nil:
		return nil, false, stateErr("reading the enrolled node", err)
	}
	e.putNode(&n)
	return &n, true, nil
}

var (
	_ credential.Store     = (*Enrolment)(nil)
	_ credential.Refresher = (*Enrolment)(nil)
	_ credential.Finder    = (*Enrolment)(nil)
)
