// Package qualify is the CNI qualification matrix of spec §5.3 as a
// runnable suite: the checks a cluster's CNI must pass before its
// implementation, version and configuration fingerprint are written down as
// a qualification record (cluster.CNIQualification), which the CNI gate
// then requires.
//
// The spec names what the matrix covers at least: egress enforcement,
// UDP/TCP DNS, IPv4 CIDRs (all protocols and ports to the destination),
// policy update and deletion, the replacement pod's first-packet window,
// conntrack, the NodeIP/hostNetwork exemption boundary, and observability.
// Each is a Row with two halves:
//
//   - the objects: the NetworkPolicies and pods the check needs, written
//     through the cluster's apiserver as corectl writes them (egress.Compile
//     with the cluster's DNS rule and allocation label), read back and
//     checked (selectors, rules, what the policy selects);
//   - the packets: connection attempts from pods carrying the allocation
//     label, run by a Prober (PodProber: one-shot pods whose exit status is
//     the answer). Without a Prober (a test apiserver has no kubelet and no
//     CNI) they are NotRun, and the report is not a qualification.
//
// Report.Qualified is true only when every half passed or is Manual (what
// this suite cannot check, conntrack and the CNI's own observability, is
// listed for the operator to confirm): a partial run never yields a
// record.
package qualify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/egress"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Status is the outcome of one half of a row.
type Status string

// Statuses.
const (
	// Pass: every check of the half held.
	Pass Status = "pass"
	// Fail: a check did not hold; Detail says which.
	Fail Status = "fail"
	// NotRun: the half was not run (no Prober, or its objects failed);
	// Detail says why.
	NotRun Status = "not-run"
	// Manual: this suite cannot check the half; the operator does, by
	// hand, before writing the record (Detail says what to look at).
	Manual Status = "manual"
)

// Row is one line of the matrix.
type Row struct {
	// ID names the row (the Row* constants).
	ID string
	// Dimension is what spec §5.3 asks the row to cover.
	Dimension string
	// Objects is the object half's outcome, ObjectsDetail why.
	Objects       Status
	ObjectsDetail string
	// Packets is the packet half's outcome, PacketsDetail why.
	Packets       Status
	PacketsDetail string
}

// Row IDs, in the order Run runs them.
const (
	RowEgressEnforcement = "egress-enforcement"
	RowDNS               = "dns-udp-tcp"
	RowCIDRAllPorts      = "cidr-all-protocols-and-ports"
	RowUpdateAndDelete   = "policy-update-and-delete"
	RowFirstPacket       = "replacement-pod-first-packet"
	RowConntrack         = "conntrack"
	RowHostNetwork       = "nodeip-hostnetwork-boundary"
	RowObservability     = "observability"
)

// Report is a run's result.
type Report struct {
	// ClusterID is the cluster the suite ran against.
	ClusterID string
	// Facts are the CNI facts the cluster runs (cluster.Cluster.CurrentCNI)
	// when the run began; a record is written for exactly these.
	Facts cluster.CNIFacts
	// Rows are the matrix's rows, in order.
	Rows []Row
}

// Qualified reports whether every half of every row passed, or is Manual
// (the operator's to confirm: ManualChecks lists them). A Fail or a
// NotRun half makes the run no qualification.
func (r *Report) Qualified() bool {
	for _, row := range r.Rows {
		for _, st := range []Status{row.Objects, row.Packets} {
			if st != Pass && st != Manual {
				return false
			}
		}
	}
	return len(r.Rows) > 0
}

// ManualChecks lists "<row>: <detail>" for every Manual half, what the
// operator confirms by hand before writing the record.
func (r *Report) ManualChecks() []string {
	var out []string
	for _, row := range r.Rows {
		if row.Objects == Manual {
			out = append(out, row.ID+": "+row.ObjectsDetail)
		}
		if row.Packets == Manual {
			out = append(out, row.ID+": "+row.PacketsDetail)
		}
	}
	return out
}

// Attempt is one connection attempt a Prober makes.
type Attempt struct {
	// Proto is "tcp" (connect to Dest, host:port) or "dns" (resolve Name
	// through the pod's cluster DNS).
	Proto string
	// Dest is host:port for "tcp".
	Dest string
	// Name is the name to resolve for "dns".
	Name string
}

// Prober makes one connection attempt from a new pod in namespace ns with
// labels (hostNetwork when host is true) and reports whether it got
// through. The attempt is the pod's first packet. Errors: the attempt
// could not be made or observed (not an answer either way).
type Prober interface {
	// Reach runs the attempt and reports whether it succeeded.
	Reach(ctx context.Context, ns string, labels map[string]string, host bool, a Attempt) (bool, error)
}

// Suite runs the matrix in one namespace of one cluster.
type Suite struct {
	// Client reaches the cluster's apiserver (uncached).
	Client client.Client
	// Cluster is the cluster's configuration (DNS selectors, allocation
	// label, CNI facts).
	Cluster *cluster.Cluster
	// Namespace is where the suite writes its policies and pods (a
	// namespace of its own, without other NetworkPolicies selecting its
	// pods); the suite removes what it wrote.
	Namespace string
	// Allowed and Denied are TCP destinations (IPv4 host:port) that a pod
	// of the namespace reaches when no policy selects it. The policies
	// allow Allowed's address as a /32 and not Denied's.
	Allowed, Denied string
	// DNSName is the name the DNS row resolves (default
	// "kubernetes.default.svc").
	DNSName string
	// Prober runs the packet half; nil: every packet half is NotRun.
	Prober Prober
}

// ErrConfig: the suite's settings are unusable.
var ErrConfig = errors.New("qualify: invalid suite settings")

// run is one Run's state.
type run struct {
	s      *Suite
	alloc  string
	labels map[string]string
	policy string
	allow  string // Allowed's address as a /32
}

// Run runs every row in order and returns the report. Objects the rows
// write are removed at the end (best effort; the namespace is the
// suite's). Errors: ErrConfig; the cluster's CNI facts cannot be read.
func (s *Suite) Run(ctx context.Context) (*Report, error) {
	if s.Client == nil || s.Cluster == nil || s.Namespace == "" {
		return nil, fmt.Errorf("%w: Client, Cluster and Namespace are required", ErrConfig)
	}
	allowed, err := ipv4Dest(s.Allowed)
	if err != nil {
		return nil, fmt.Errorf("%w: Allowed: %s", ErrConfig, err.Error())
	}
	if _, err := ipv4Dest(s.Denied); err != nil {
		return nil, fmt.Errorf("%w: Denied: %s", ErrConfig, err.Error())
	}
	facts, err := s.Cluster.CurrentCNI()
	if err != nil {
		return nil, err
	}
	rnd := make([]byte, 8)
	_, _ = rand.Read(rnd)
	r := &run{s: s, alloc: "alq" + hex.EncodeToString(rnd), allow: netip.PrefixFrom(allowed, 32).String()}
	r.labels = map[string]string{s.Cluster.AllocationLabelKey(): r.alloc}
	r.policy = egress.PolicyName(r.alloc)
	defer r.cleanup(context.WithoutCancel(ctx))
	rep := &Report{ClusterID: s.Cluster.ID, Facts: facts}
	for _, row := range []func(context.Context) Row{
		r.egressEnforcement, r.dns, r.cidrAllPorts, r.updateAndDelete, r.firstPacket, r.conntrack, r.hostNetwork, r.observability,
	} {
		rep.Rows = append(rep.Rows, row(ctx))
	}
	return rep, nil
}

func ipv4Dest(hostport string) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%q is not an IPv4 host:port", hostport)
	}
	return a, nil
}

// writePolicy creates or updates the run's policy with set (CIDRs), as
// corectl compiles it, and reads it back: the spec read back must be the
// spec written.
func (r *run) writePolicy(ctx context.Context, set []string) error {
	spec := egress.Compile(r.s.Cluster, r.s.Cluster.AllocationLabelKey(), r.alloc, set)
	key := client.ObjectKey{Namespace: r.s.Namespace, Name: r.policy}
	cur := &networkingv1.NetworkPolicy{}
	err := r.s.Client.Get(ctx, key, cur)
	switch {
	case apierrors.IsNotFound(err):
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{"network.sandgate.io/qualification": "true"}}, Spec: spec}
		if err := r.s.Client.Create(ctx, np); err != nil {
			return fmt.Errorf("create the policy: %w", err)
		}
	case err != nil:
		return fmt.Errorf("read the policy: %w", err)
	default:
		cur.Spec = spec
		if err := r.s.Client.Update(ctx, cur); err != nil {
			return fmt.Errorf("update the policy: %w", err)
		}
	}
	rb := &networkingv1.NetworkPolicy{}
	if err := r.s.Client.Get(ctx, key, rb); err != nil {
		return fmt.Errorf("read the policy back: %w", err)
	}
	if egress.Canonical(&rb.Spec) != egress.Canonical(&spec) {
		return errors.New("the policy read back differs from the policy written")
	}
	return nil
}

// deletePolicy deletes the run's policy and confirms it is gone.
func (r *run) deletePolicy(ctx context.Context) error {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: r.s.Namespace, Name: r.policy}}
	if err := r.s.Client.Delete(ctx, np); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the policy: %w", err)
	}
	if err := r.s.Client.Get(ctx, client.ObjectKeyFromObject(np), np); !apierrors.IsNotFound(err) {
		return fmt.Errorf("the policy is still there after its deletion (%v)", err)
	}
	return nil
}

// expect is one packet check: attempt a from a pod with the run's labels
// (hostNetwork when host), expecting reachable.
type expect struct {
	what      string
	a         Attempt
	host      bool
	reachable bool
}

// packets runs the checks in order; NotRun without a Prober.
func (r *run) packets(ctx context.Context, checks ...expect) (Status, string) {
	if r.s.Prober == nil {
		return NotRun, "no prober: connection attempts need the cluster's kubelet and CNI (run the suite against the cluster)"
	}
	for _, c := range checks {
		got, err := r.s.Prober.Reach(ctx, r.s.Namespace, r.labels, c.host, c.a)
		if err != nil {
			return Fail, c.what + ": " + err.Error()
		}
		if got != c.reachable {
			return Fail, fmt.Sprintf("%s: reachable %v, want %v", c.what, got, c.reachable)
		}
	}
	return Pass, fmt.Sprintf("%d attempts as expected", len(checks))
}

func objects(err error, ok string) (Status, string) {
	if err != nil {
		return Fail, err.Error()
	}
	return Pass, ok
}

func (r *run) tcp(dest string) Attempt { return Attempt{Proto: "tcp", Dest: dest} }

// egressEnforcement: the policy allowing Allowed only; Allowed reachable,
// Denied not.
func (r *run) egressEnforcement(ctx context.Context) Row {
	row := Row{ID: RowEgressEnforcement, Dimension: "egress enforcement: a selected pod reaches only the allowed CIDRs"}
	err := r.writePolicy(ctx, []string{r.allow})
	if err == nil {
		err = r.selects(ctx, false)
	}
	row.Objects, row.ObjectsDetail = objects(err, "policy written as compiled, read back equal; it selects a pod with the allocation label")
	if err != nil {
		row.Packets, row.PacketsDetail = NotRun, "the objects failed"
		return row
	}
	row.Packets, row.PacketsDetail = r.packets(ctx,
		expect{what: "allowed destination", a: r.tcp(r.s.Allowed), reachable: true},
		expect{what: "denied destination", a: r.tcp(r.s.Denied), reachable: false})
	return row
}

// selects checks, with a pod object that carries the run's labels
// (hostNetwork when host), that the policy's podSelector selects it: the
// pod is created, listed with the policy's selector and deleted.
func (r *run) selects(ctx context.Context, host bool) error {
	np := &networkingv1.NetworkPolicy{}
	if err := r.s.Client.Get(ctx, client.ObjectKey{Namespace: r.s.Namespace, Name: r.policy}, np); err != nil {
		return fmt.Errorf("read the policy: %w", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		return fmt.Errorf("the policy's podSelector: %w", err)
	}
	rnd := make([]byte, 4)
	_, _ = rand.Read(rnd)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: r.s.Namespace, Name: "qualify-select-" + hex.EncodeToString(rnd), Labels: r.labels},
		Spec: corev1.PodSpec{HostNetwork: host, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "idle", Image: "registry.k8s.io/pause:3.10"}}}}
	if err := r.s.Client.Create(ctx, pod); err != nil {
		return fmt.Errorf("create a pod with the allocation label: %w", err)
	}
	defer func() { _ = r.s.Client.Delete(context.WithoutCancel(ctx), pod) }()
	var list corev1.PodList
	if err := r.s.Client.List(ctx, &list, client.InNamespace(r.s.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return fmt.Errorf("list the pods the policy selects: %w", err)
	}
	if !slices.ContainsFunc(list.Items, func(p corev1.Pod) bool { return p.Name == pod.Name }) {
		return errors.New("the policy's podSelector does not select a pod with the allocation label")
	}
	return nil
}

// dns: the DNS rule allows UDP and TCP 53 to the cluster's DNS pods, and
// those selectors select at least one pod; lookups through the cluster
// DNS work under the policy.
func (r *run) dns(ctx context.Context) Row {
	row := Row{ID: RowDNS, Dimension: "UDP/TCP DNS to the platform's DNS pods, under a policy that allows nothing else"}
	n, err := r.dnsPods(ctx)
	if err == nil && n == 0 {
		err = errors.New("the cluster's DNS selectors select no pod: every selected pod's DNS would be blocked")
	}
	if err == nil {
		err = r.writePolicy(ctx, nil)
	}
	row.Objects, row.ObjectsDetail = objects(err, fmt.Sprintf("the DNS rule (UDP and TCP 53) selects %d DNS pod(s)", n))
	if err != nil {
		row.Packets, row.PacketsDetail = NotRun, "the objects failed"
		return row
	}
	name := r.s.DNSName
	if name == "" {
		name = "kubernetes.default.svc"
	}
	row.Packets, row.PacketsDetail = r.packets(ctx, expect{what: "lookup of " + name, a: Attempt{Proto: "dns", Name: name}, reachable: true})
	return row
}

// dnsPods counts the pods the cluster's DNS selectors select.
func (r *run) dnsPods(ctx context.Context) (int, error) {
	nsSel, err := metav1.LabelSelectorAsSelector(&r.s.Cluster.DNS.NamespaceSelector)
	if err != nil {
		return 0, fmt.Errorf("the DNS namespaceSelector: %w", err)
	}
	podSel, err := metav1.LabelSelectorAsSelector(&r.s.Cluster.DNS.PodSelector)
	if err != nil {
		return 0, fmt.Errorf("the DNS podSelector: %w", err)
	}
	var nss corev1.NamespaceList
	if err := r.s.Client.List(ctx, &nss, client.MatchingLabelsSelector{Selector: nsSel}); err != nil {
		return 0, fmt.Errorf("list the DNS namespaces: %w", err)
	}
	n := 0
	for _, ns := range nss.Items {
		var pods corev1.PodList
		if err := r.s.Client.List(ctx, &pods, client.InNamespace(ns.Name), client.MatchingLabelsSelector{Selector: podSel}); err != nil {
			return 0, fmt.Errorf("list the DNS pods in %s: %w", ns.Name, err)
		}
		n += len(pods.Items)
	}
	return n, nil
}

// cidrAllPorts: a CIDR rule carries no ports and no protocol (all of
// them, as the object half checks); the packet half connects to the
// allowed destination's port, which no port list names.
func (r *run) cidrAllPorts(ctx context.Context) Row {
	row := Row{ID: RowCIDRAllPorts, Dimension: "an IPv4 CIDR allows every protocol and port to the destination"}
	err := r.writePolicy(ctx, []string{r.allow})
	if err == nil {
		np := &networkingv1.NetworkPolicy{}
		if err = r.s.Client.Get(ctx, client.ObjectKey{Namespace: r.s.Namespace, Name: r.policy}, np); err == nil {
			for _, rule := range np.Spec.Egress {
				if len(rule.To) == 1 && rule.To[0].IPBlock != nil && len(rule.Ports) != 0 {
					err = fmt.Errorf("the CIDR rule %s restricts ports", rule.To[0].IPBlock.CIDR)
				}
			}
		}
	}
	row.Objects, row.ObjectsDetail = objects(err, "the CIDR rule has no ports (all protocols and ports)")
	if err != nil {
		row.Packets, row.PacketsDetail = NotRun, "the objects failed"
		return row
	}
	row.Packets, row.PacketsDetail = r.packets(ctx, expect{what: "allowed destination, its port", a: r.tcp(r.s.Allowed), reachable: true})
	return row
}

// updateAndDelete: after an update that drops Allowed it is blocked;
// after the policy's deletion Denied is reachable (no policy selects the
// pod: default allow).
func (r *run) updateAndDelete(ctx context.Context) Row {
	row := Row{ID: RowUpdateAndDelete, Dimension: "a policy update and a policy deletion take effect"}
	if err := r.writePolicy(ctx, nil); err != nil {
		row.Objects, row.ObjectsDetail = Fail, err.Error()
		row.Packets, row.PacketsDetail = NotRun, "the objects failed"
		return row
	}
	st, detail := r.packets(ctx, expect{what: "allowed destination after the update that dropped it", a: r.tcp(r.s.Allowed), reachable: false})
	err := r.deletePolicy(ctx)
	row.Objects, row.ObjectsDetail = objects(err, "updated (read back equal) and deleted (confirmed gone)")
	if err != nil {
		row.Packets, row.PacketsDetail = NotRun, "the objects failed"
		return row
	}
	if st == Pass {
		st, detail = r.packets(ctx, expect{what: "denied destination with no policy", a: r.tcp(r.s.Denied), reachable: true})
	}
	row.Packets, row.PacketsDetail = st, detail
	return row
}

// firstPacket: a new pod of the allocation (the policy already in place)
// is confined from its first packet.
func (r *run) firstPacket(ctx context.Context) Row {
	row := Row{ID: RowFirstPacket, Dimension: "a replacement pod is confined from its first packet"}
	err := r.writePolicy(ctx, []string{r.allow})
	if err == nil {
		err = r.selects(ctx, false)
	}
	row.Objects, row.ObjectsDetail = objects(err, "the policy is in place before the pod exists and selects it")
	if err != nil {
		row.Packets, row.PacketsDetail = NotRun, "the objects failed"
		return row
	}
	row.Packets, row.PacketsDetail = r.packets(ctx, expect{what: "the new pod's first packet, to the denied destination", a: r.tcp(r.s.Denied), reachable: false})
	return row
}

// conntrack: Manual. The check needs one pod that holds a connection
// across a policy update (established flows the CNI keeps in conntrack
// after the CIDR is removed), which a one-shot prober cannot do.
func (r *run) conntrack(context.Context) Row {
	return Row{ID: RowConntrack, Dimension: "established connections (conntrack) across a policy update",
		Objects: Pass, ObjectsDetail: "no objects beyond the other rows'",
		Packets: Manual, PacketsDetail: "from a pod with the allocation label, hold a TCP connection to the allowed destination, drop it from the policy, and record whether the held connection survives and a new one is refused (it must be)"}
}

// hostNetwork: a hostNetwork pod with the allocation label is selected by
// the policy as an object, and NetworkPolicy does not confine it (the
// exemption boundary the platform must keep: sandboxes never run with
// hostNetwork). The packet half passes when the exemption is as
// documented: the denied destination is reachable from such a pod.
func (r *run) hostNetwork(ctx context.Context) Row {
	row := Row{ID: RowHostNetwork, Dimension: "NodeIP/hostNetwork exemption boundary: hostNetwork pods are not confined"}
	err := r.writePolicy(ctx, []string{r.allow})
	if err == nil {
		err = r.selects(ctx, true)
	}
	row.Objects, row.ObjectsDetail = objects(err, "a hostNetwork pod with the allocation label is selected by the policy object")
	if err != nil {
		row.Packets, row.PacketsDetail = NotRun, "the objects failed"
		return row
	}
	row.Packets, row.PacketsDetail = r.packets(ctx, expect{what: "denied destination from a hostNetwork pod (exempt)", a: r.tcp(r.s.Denied), host: true, reachable: true})
	return row
}

// observability: the CNI facts the record binds are readable, and the
// policy the other rows wrote read back as written (checked there).
func (r *run) observability(ctx context.Context) Row {
	row := Row{ID: RowObservability, Dimension: "observability: the facts the record binds, and policies read back as written"}
	_, err := r.s.Cluster.CurrentCNI()
	row.Objects, row.ObjectsDetail = objects(err, "the cluster's CNI facts are readable")
	row.Packets, row.PacketsDetail = Manual, "check that the CNI reports the denied attempts of this run (its policy logs or drop metrics)"
	return row
}

// cleanup removes the run's policy and pods.
func (r *run) cleanup(ctx context.Context) {
	_ = r.s.Client.Delete(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: r.s.Namespace, Name: r.policy}})
	_ = r.s.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(r.s.Namespace), client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(r.labels)})
}
