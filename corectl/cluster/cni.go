package cluster

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// CNISource says where a cluster's current CNI facts are read from, in the
// cluster itself (spec §5.3: the qualification is "bound to clusterId +
// CNI implementation + CNI version + relevant configuration fingerprint",
// and a fingerprint that changes invalidates it):
//
//	cniSource:
//	  implementation: calico
//	  daemonSet: {namespace: kube-system, name: calico-node}
//	  container: calico-node            # default: the first container
//	  config: {namespace: kube-system, name: calico-config}   # a ConfigMap
//	  keys: [cni_network_config, veth_mtu]                    # default: all of data and binaryData
//
// The version is the tag (or, without one, the digest) of the container's
// image; the fingerprint is "sha256:" and the hex SHA-256 of the
// ConfigMap's selected entries (CNIFingerprint). corectl re-reads them
// every -cni-check-interval on every replica, without a restart.
type CNISource struct {
	// Implementation names the CNI (it is not read from the cluster).
	Implementation string `json:"implementation"`
	// DaemonSet is the CNI's DaemonSet.
	DaemonSet ObjectRef `json:"daemonSet"`
	// Container is the DaemonSet container whose image gives the version
	// (default: the first container).
	Container string `json:"container,omitempty"`
	// Config is the ConfigMap holding the CNI's configuration.
	Config ObjectRef `json:"config"`
	// Keys restricts the fingerprint to these data/binaryData keys
	// (default: every key). A listed key that is missing is an error.
	Keys []string `json:"keys,omitempty"`
}

// ObjectRef names a namespaced object.
type ObjectRef struct {
	// Namespace is the object's namespace.
	Namespace string `json:"namespace"`
	// Name is the object's name.
	Name string `json:"name"`
}

func (s *CNISource) validate() error {
	if s.Implementation == "" {
		return errors.New("cniSource.implementation is required")
	}
	for _, r := range []struct {
		what string
		ref  ObjectRef
	}{{"cniSource.daemonSet", s.DaemonSet}, {"cniSource.config", s.Config}} {
		if errs := validation.IsDNS1123Label(r.ref.Namespace); len(errs) > 0 {
			return fmt.Errorf("%s.namespace: %s", r.what, strings.Join(errs, "; "))
		}
		if errs := validation.IsDNS1123Subdomain(r.ref.Name); len(errs) > 0 {
			return fmt.Errorf("%s.name: %s", r.what, strings.Join(errs, "; "))
		}
	}
	for _, k := range s.Keys {
		if errs := validation.IsConfigMapKey(k); len(errs) > 0 {
			return fmt.Errorf("cniSource.keys %q: %s", k, strings.Join(errs, "; "))
		}
	}
	return nil
}

// cniObservation is the latest reading of a cluster's CNI facts, shared by
// the copies of its Cluster.
type cniObservation struct {
	mu    sync.Mutex
	set   bool
	facts CNIFacts
	err   error
	at    time.Time
}

// ErrCNIFactsUnknown: the cluster's CNI facts (cniSource) have not been
// read yet, or the last reading failed.
var ErrCNIFactsUnknown = errors.New("cluster: current CNI facts unknown")

// SetObservedCNI records a reading of the cluster's CNI facts from its
// cniSource (err: the reading failed) at time at. It does nothing for a
// cluster without cniSource, or one that did not pass Validate.
func (c *Cluster) SetObservedCNI(f CNIFacts, err error, at time.Time) {
	if c.cniObserved == nil {
		return
	}
	o := c.cniObserved
	o.mu.Lock()
	defer o.mu.Unlock()
	o.set, o.facts, o.err, o.at = true, f, err, at
}

// CurrentCNI returns the CNI facts the cluster runs now: the static cni
// facts, or the latest reading of cniSource. The error wraps
// ErrCNIFactsUnknown when cniSource has not been read yet or the last
// reading failed (it then says why).
func (c *Cluster) CurrentCNI() (CNIFacts, error) {
	if c.CNISource == nil {
		return c.CNI, nil
	}
	o := c.cniObserved
	if o == nil {
		return CNIFacts{}, fmt.Errorf("%w: cluster %s: the configuration was not validated", ErrCNIFactsUnknown, c.ID)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case !o.set:
		return CNIFacts{}, fmt.Errorf("%w: cluster %s: not read yet", ErrCNIFactsUnknown, c.ID)
	case o.err != nil:
		return CNIFacts{}, fmt.Errorf("%w: cluster %s: %s", ErrCNIFactsUnknown, c.ID, o.err.Error())
	}
	return o.facts, nil
}

// Reasons of a closed CNI gate, as CNIGateReason returns them (the
// CNIQualification condition's reasons).
const (
	ReasonQualified             = "Qualified"
	ReasonGateOff               = "QualificationNotRequired"
	ReasonRecordMissing         = "RecordMissing"
	ReasonClusterMismatch       = "ClusterMismatch"
	ReasonImplementationChanged = "ImplementationChanged"
	ReasonVersionChanged        = "VersionChanged"
	ReasonFingerprintChanged    = "FingerprintChanged"
	ReasonFactsUnreadable       = "FactsUnreadable"
)

// CNIGateReason evaluates the gate as CNIGate does and also returns the
// reason (one of the Reason* constants).
func (c *Cluster) CNIGateReason() (string, error) {
	if c.CNIQualificationRequired != nil && !*c.CNIQualificationRequired {
		return ReasonGateOff, nil
	}
	q := c.CNIQualification
	if q == nil {
		return ReasonRecordMissing, fmt.Errorf("%w: cluster %s has no qualification record", ErrCNIUnqualified, c.ID)
	}
	if q.ClusterID != c.ID {
		return ReasonClusterMismatch, fmt.Errorf("%w: the record of cluster %s is bound to cluster %s", ErrCNIUnqualified, c.ID, q.ClusterID)
	}
	cur, err := c.CurrentCNI()
	if err != nil {
		return ReasonFactsUnreadable, fmt.Errorf("%w: %s", ErrCNIUnqualified, err.Error())
	}
	switch {
	case q.Implementation != cur.Implementation:
		return ReasonImplementationChanged, fmt.Errorf("%w: cluster %s runs CNI %q, the record is for %q", ErrCNIUnqualified, c.ID, cur.Implementation, q.Implementation)
	case q.Version != cur.Version:
		return ReasonVersionChanged, fmt.Errorf("%w: cluster %s runs CNI version %q, the record is for %q", ErrCNIUnqualified, c.ID, cur.Version, q.Version)
	case q.Fingerprint != cur.Fingerprint:
		return ReasonFingerprintChanged, fmt.Errorf("%w: cluster %s CNI configuration fingerprint changed since qualification", ErrCNIUnqualified, c.ID)
	}
	return ReasonQualified, nil
}
