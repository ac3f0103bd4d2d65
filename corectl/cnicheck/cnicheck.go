// Package cnicheck keeps a compute cluster's CNI gate (spec §5.3) true to
// the cluster: it reads the CNI facts the cluster runs now from the
// cluster itself (cluster.CNISource: the CNI DaemonSet's image version and
// a fingerprint of its configuration ConfigMap) every interval, without a
// restart, so that a CNI upgrade or a configuration change closes the gate
// for new enforced creates and egress PUTs until the qualification record
// is renewed. Every replica reads for itself (the gate is checked on every
// replica's API); the leader also reports: the CNIQualification object's
// Qualified condition, an Event on each change, and the
// corectl_cni_gate_open gauge and corectl_cni_checks_total counter.
package cnicheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/metrics"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultInterval is Checker.Interval's default.
const DefaultInterval = time.Minute

// ConditionQualified is the CNIQualification condition type.
const ConditionQualified = "Qualified"

// ConditionWatching is the CNIQualification condition that says whether
// the gate follows the cluster: True (reason ReasonReadFromCluster) when
// the facts are read from the cluster (cniSource) and re-read every
// interval; False (reason ReasonStaticFacts) when they are written in the
// configuration (cni:), which nothing compares with what the cluster runs,
// so a CNI upgrade or configuration change never closes the gate (spec
// §5.3 wants the gate closed on drift).
const ConditionWatching = "Watching"

// Reasons of ConditionWatching.
const (
	// ReasonReadFromCluster: cniSource, re-read every interval.
	ReasonReadFromCluster = "ReadFromCluster"
	// ReasonStaticFacts: cni: in the configuration, never re-read.
	ReasonStaticFacts = "StaticFacts"
)

// StaticFactsWarning is the warning logged at start, per cluster, and
// written as ConditionWatching's message when the facts are static.
const StaticFactsWarning = "the CNI gate is not watching the cluster: its facts are written in the configuration (cni:), so a CNI upgrade or configuration change will not close it; use cniSource to read them from the cluster"

// WatchingCondition returns the ConditionWatching condition for c.
func WatchingCondition(c *cluster.Cluster) metav1.Condition {
	if c.CNISource != nil {
		return metav1.Condition{Type: ConditionWatching, Status: metav1.ConditionTrue, Reason: ReasonReadFromCluster,
			Message: "the CNI facts are read from the cluster every interval"}
	}
	return metav1.Condition{Type: ConditionWatching, Status: metav1.ConditionFalse, Reason: ReasonStaticFacts, Message: StaticFactsWarning}
}

// Event reasons on the CNIQualification object.
const (
	// EventUnqualified: the gate closed (Warning).
	EventUnqualified = "CNIUnqualified"
	// EventQualified: the gate opened (Normal).
	EventQualified = "CNIQualified"
)

// ErrRead wraps every error of Read.
var ErrRead = errors.New("cnicheck: cannot read the CNI facts")

// Read returns the CNI facts src names: Implementation from src, Version
// from the DaemonSet container's image (ImageVersion), Fingerprint of the
// ConfigMap (Fingerprint). Errors wrap ErrRead and say which object.
func Read(ctx context.Context, r client.Reader, src *cluster.CNISource) (cluster.CNIFacts, error) {
	ds := &appsv1.DaemonSet{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: src.DaemonSet.Namespace, Name: src.DaemonSet.Name}, ds); err != nil {
		return cluster.CNIFacts{}, fmt.Errorf("%w: DaemonSet %s/%s: %s", ErrRead, src.DaemonSet.Namespace, src.DaemonSet.Name, err.Error())
	}
	image := ""
	for i, c := range ds.Spec.Template.Spec.Containers {
		if (src.Container == "" && i == 0) || c.Name == src.Container {
			image = c.Image
			break
		}
	}
	if image == "" {
		return cluster.CNIFacts{}, fmt.Errorf("%w: DaemonSet %s/%s has no container %q with an image", ErrRead, ds.Namespace, ds.Name, src.Container)
	}
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: src.Config.Namespace, Name: src.Config.Name}, cm); err != nil {
		return cluster.CNIFacts{}, fmt.Errorf("%w: ConfigMap %s/%s: %s", ErrRead, src.Config.Namespace, src.Config.Name, err.Error())
	}
	fp, err := Fingerprint(cm, src.Keys)
	if err != nil {
		return cluster.CNIFacts{}, fmt.Errorf("%w: ConfigMap %s/%s: %s", ErrRead, cm.Namespace, cm.Name, err.Error())
	}
	return cluster.CNIFacts{Implementation: src.Implementation, Version: ImageVersion(image), Fingerprint: fp}, nil
}

// ImageVersion is the version an image reference names: its tag
// ("calico/node:v3.28.1" → "v3.28.1"), else its digest
// ("…@sha256:ab…" → "sha256:ab…"), else "latest" (what a reference
// without either pulls). A tag together with a digest gives the tag.
func ImageVersion(image string) string {
	ref, digest, _ := strings.Cut(image, "@")
	// A colon after the last slash is the tag's; one before it belongs to
	// the registry's host:port.
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	if digest != "" {
		return digest
	}
	return "latest"
}

// Fingerprint is "sha256:" and the hex SHA-256 of the canonical JSON of a
// ConfigMap's entries: {"binaryData": {…}, "data": {…}} with keys sorted
// (encoding/json sorts map keys), restricted to keys when given. The
// fingerprint of a qualification record is computed the same way
// (`corectl -print-cni-facts`). A listed key that is absent is an error.
func Fingerprint(cm *corev1.ConfigMap, keys []string) (string, error) {
	data, bin := map[string]string{}, map[string][]byte{}
	for k, v := range cm.Data {
		if len(keys) == 0 || slices.Contains(keys, k) {
			data[k] = v
		}
	}
	for k, v := range cm.BinaryData {
		if len(keys) == 0 || slices.Contains(keys, k) {
			bin[k] = v
		}
	}
	for _, k := range keys {
		_, inData := data[k]
		_, inBin := bin[k]
		if !inData && !inBin {
			return "", fmt.Errorf("key %q is missing", k)
		}
	}
	b, err := json.Marshal(struct {
		BinaryData map[string][]byte `json:"binaryData"`
		Data       map[string]string `json:"data"`
	}{bin, data})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// ObjectName is the CNIQualification name for a cluster ID: the ID when
// it is a valid name, else "cluster-" and a hash.
func ObjectName(clusterID string) string {
	n := strings.ToLower(clusterID)
	if len(validation.IsDNS1123Subdomain(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(clusterID))
	return "cluster-" + hex.EncodeToString(sum[:6])
}

// EventRecorder is the part of k8s.io/client-go/tools/events.EventRecorder
// the checker uses.
type EventRecorder interface {
	// Eventf records a Kubernetes Event (eventtype Normal or Warning)
	// on regarding; note is a format for args.
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// Checker observes one cluster's CNI facts (Observer, on every replica,
// only with a cniSource) and reports the gate (Reporter, on the leader;
// with static facts too, so the CNIQualification object says that the
// gate is not watching).
type Checker struct {
	// Cluster is the cluster, its configuration validated; its CNISource
	// must be set for Observe (the Reporter also serves static facts).
	Cluster *cluster.Cluster
	// Reader reads the DaemonSet and ConfigMap (uncached).
	Reader client.Reader
	// Client writes the CNIQualification object.
	Client client.Client
	// Events records the Events on the CNIQualification object (nil:
	// none).
	Events EventRecorder
	// Namespace holds the CNIQualification object (corectl's own
	// namespace in the cluster, where its Lease is).
	Namespace string
	// Interval is the period of the readings (default DefaultInterval).
	Interval time.Duration
	// Metrics counts the readings (corectl_cni_checks_total); nil counts
	// nothing.
	Metrics *metrics.Metrics
	// Log receives one line per change of the gate and per failed write.
	Log logr.Logger

	observed chan struct{}
}

func (k *Checker) interval() time.Duration {
	if k.Interval > 0 {
		return k.Interval
	}
	return DefaultInterval
}

// Observe reads the cluster's CNI facts once and records them on the
// Cluster (cluster.Cluster.SetObservedCNI), which the gate then uses.
func (k *Checker) Observe(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	f, err := Read(rctx, k.Reader, k.Cluster.CNISource)
	k.Cluster.SetObservedCNI(f, err, time.Now())
	outcome := "ok"
	if err != nil {
		outcome = "unreadable"
	}
	k.Metrics.CNICheck(k.Cluster.ID, outcome)
	if k.observed != nil {
		select {
		case k.observed <- struct{}{}:
		default:
		}
	}
}

// Observer is the every-replica runnable: Observe at start, then every
// interval.
func (k *Checker) Observer() *Observer { return &Observer{k: k} }

// Reporter is the leader's runnable: after every reading (and at least
// every interval) it writes the CNIQualification object and emits an
// Event when the Qualified condition changes.
func (k *Checker) Reporter() *Reporter {
	if k.observed == nil {
		k.observed = make(chan struct{}, 1)
	}
	return &Reporter{k: k}
}

// Observer runs Observe periodically on every replica.
type Observer struct{ k *Checker }

// NeedLeaderElection is false: every replica enforces the gate from its
// own reading.
func (o *Observer) NeedLeaderElection() bool { return false }

// Start observes until ctx ends.
func (o *Observer) Start(ctx context.Context) error {
	t := time.NewTicker(o.k.interval())
	defer t.Stop()
	for {
		o.k.Observe(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Reporter writes the gate's state on the leader.
type Reporter struct{ k *Checker }

// NeedLeaderElection is true: one writer.
func (r *Reporter) NeedLeaderElection() bool { return true }

// Start reports until ctx ends: ReportOnce at start, then every Every
// and whenever Wake fires.
func (r *Reporter) Start(ctx context.Context) error {
	t := time.NewTicker(r.Every())
	defer t.Stop()
	for {
		r.ReportOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-r.k.observed:
		}
	}
}

// Every is the reporter's period: the checker's Interval (default
// DefaultInterval).
func (r *Reporter) Every() time.Duration { return r.k.interval() }

// Wake fires after each reading (Observe), when the report should be
// written again at once.
func (r *Reporter) Wake() <-chan struct{} { return r.k.observed }

// ReportOnce writes the report once (Report), logging a failure; the next
// run retries.
func (r *Reporter) ReportOnce(ctx context.Context) {
	if err := r.k.Report(ctx); err != nil {
		r.k.Log.Info("CNI gate report failed", "cluster", r.k.Cluster.ID, "error", err.Error())
	}
}

// Report writes the CNIQualification object from the cluster's current
// state (the latest reading and the record) and emits an Event on the
// object when the Qualified condition's status or reason changes.
func (k *Checker) Report(ctx context.Context) error {
	c := k.Cluster
	reason, gateErr := c.CNIGateReason()
	cond := metav1.Condition{Type: ConditionQualified, Status: metav1.ConditionTrue, Reason: reason,
		Message: "new enforced creates and egress PUTs are allowed"}
	if gateErr != nil {
		cond.Status, cond.Message = metav1.ConditionFalse, gateErr.Error()+"; new enforced creates and egress PUTs are refused"
	}
	obj := &v1alpha1.CNIQualification{}
	key := client.ObjectKey{Namespace: k.Namespace, Name: ObjectName(c.ID)}
	err := k.Client.Get(ctx, key, obj)
	create := apierrors.IsNotFound(err)
	if err != nil && !create {
		return fmt.Errorf("read CNIQualification %s: %w", key, err)
	}
	if create {
		obj = &v1alpha1.CNIQualification{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: c.ID}}}
	}
	prev := meta.FindStatusCondition(obj.Status.Conditions, ConditionQualified)
	changed := prev == nil || prev.Status != cond.Status || prev.Reason != cond.Reason
	st := &obj.Status
	st.ClusterID = c.ID
	st.Observed, st.Record = nil, nil
	if cur, err := c.CurrentCNI(); err == nil {
		st.Observed = &v1alpha1.CNIFacts{Implementation: cur.Implementation, Version: cur.Version, Fingerprint: cur.Fingerprint}
	}
	if q := c.CNIQualification; q != nil {
		st.Record = &v1alpha1.CNIFacts{Implementation: q.Implementation, Version: q.Version, Fingerprint: q.Fingerprint}
	}
	now := metav1.Now()
	st.CheckedAt = &now
	meta.SetStatusCondition(&st.Conditions, cond)
	meta.SetStatusCondition(&st.Conditions, WatchingCondition(c))
	if create {
		err = k.Client.Create(ctx, obj)
	} else {
		err = k.Client.Update(ctx, obj)
	}
	if err != nil {
		return fmt.Errorf("write CNIQualification %s: %w", key, err)
	}
	if changed && k.Events != nil {
		if cond.Status == metav1.ConditionTrue {
			k.Events.Eventf(obj, nil, corev1.EventTypeNormal, EventQualified, "CheckCNI", "cluster %s: %s", c.ID, reason)
		} else {
			k.Events.Eventf(obj, nil, corev1.EventTypeWarning, EventUnqualified, "CheckCNI", "cluster %s: %s: %s", c.ID, reason, gateErr.Error())
		}
		k.Log.Info("CNI gate changed", "cluster", c.ID, "qualified", cond.Status, "reason", reason)
	}
	return nil
}
