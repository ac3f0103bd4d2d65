package qualify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultProbeImage is PodProber's default image: busybox, whose nc and
// nslookup make the attempts.
const DefaultProbeImage = "busybox:1.36"

// PodProber is the Prober for a real cluster: each attempt is a one-shot
// pod (restartPolicy Never) whose only command makes the attempt, so the
// attempt is the pod's first packet; the pod's phase is the answer
// (Succeeded: reached, Failed: not). It needs create, get and delete on
// pods in the suite's namespace, and the image pullable there.
type PodProber struct {
	// Client reaches the cluster's apiserver (uncached).
	Client client.Client
	// Image runs the attempt (default DefaultProbeImage).
	Image string
	// Timeout bounds one attempt, from the pod's creation to its end
	// (default 2 minutes: the image pull included).
	Timeout time.Duration
	// Interval is the pause between reads of the pod (default 1 s).
	Interval time.Duration
}

// Reach implements Prober. tcp: nc -z -w 5 host port; dns: nslookup name.
// Errors: an unknown Proto, the pod could not be created or read, or it
// did not end within the timeout.
func (p *PodProber) Reach(ctx context.Context, ns string, labels map[string]string, host bool, a Attempt) (bool, error) {
	var cmd []string
	switch a.Proto {
	case "tcp":
		h, port, err := net.SplitHostPort(a.Dest)
		if err != nil {
			return false, err
		}
		cmd = []string{"nc", "-z", "-w", "5", h, port}
	case "dns":
		cmd = []string{"nslookup", a.Name}
	default:
		return false, fmt.Errorf("unknown attempt %q", a.Proto)
	}
	image, timeout, interval := p.Image, p.Timeout, p.Interval
	if image == "" {
		image = DefaultProbeImage
	}
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	if interval <= 0 {
		interval = time.Second
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "qualify-probe-", Labels: labels},
		Spec: corev1.PodSpec{HostNetwork: host, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "attempt", Image: image, Command: cmd}}},
	}
	if err := p.Client.Create(ctx, pod); err != nil {
		return false, fmt.Errorf("create the probe pod: %w", err)
	}
	defer func() { _ = p.Client.Delete(context.WithoutCancel(ctx), pod) }()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		cur := &corev1.Pod{}
		if err := p.Client.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("read the probe pod: %w", err)
		}
		switch cur.Status.Phase {
		case corev1.PodSucceeded:
			return true, nil
		case corev1.PodFailed:
			return false, nil
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, errors.New("the probe pod did not end within " + timeout.String())
		case <-t.C:
		}
	}
}
