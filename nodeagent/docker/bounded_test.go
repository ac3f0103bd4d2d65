package docker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/internal/memtest"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/provider"
)

// hugeLabelImage commits the test image with labels of about size bytes
// in all (64 KiB values) as a new image, removed when t ends: a tenant's
// sandbox image, built on the real engine.
func (e *env) hugeLabelImage(t *testing.T, size int) string {
	t.Helper()
	labels := map[string]string{}
	value := strings.Repeat("x", 64<<10)
	for i := 0; i*len(value) < size; i++ {
		labels[fmt.Sprintf("tenant.label.%d", i)] = value
	}
	// A created, never started container to commit from.
	base, err := e.cli.ContainerCreate(ctx(t), &container.Config{Image: e.image, Labels: map[string]string{LabelNodeID: e.p.cfg.NodeID}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	ref := "sandgate-test/huge-labels:" + uuid.NewString()[:8]
	if _, err := e.cli.ContainerCommit(ctx(t), base.ID, container.CommitOptions{Reference: ref, Config: &container.Config{Labels: labels, Cmd: []string{"sleep", "3600"}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := e.cli.ImageRemove(ctx(t), ref, image.RemoveOptions{Force: true}); err != nil {
			t.Errorf("clean-up: remove %s: %v", ref, err)
		}
	})
	return ref
}

// A create from an image whose configuration is over the bounds answers
// invalid and creates nothing: over MaxInspectBytes (the read stops
// there) and between MaxImageConfigBytes and MaxInspectBytes.
func TestCreateFromImageWithHugeLabelsIsInvalid(t *testing.T) {
	for name, size := range map[string]int{"over the read bound": 2 * MaxInspectBytes, "over the image bound": MaxImageConfigBytes + 64<<10} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			img := e.hugeLabelImage(t, size)
			c := e.call()
			_, err := e.p.Create(ctx(t), c, proto.Bootstrap{Image: img, Entrypoint: []string{"sleep", "3600"}})
			wantCode(t, "create from an image with huge labels", err, proto.ErrInvalid)
			if !errors.Is(err, errImageConfigTooLarge) {
				t.Fatalf("create: %v, want the image configuration's size as the cause", err)
			}
			_, err = e.p.GetInfo(ctx(t), c)
			wantCode(t, "info after the refused create", err, proto.ErrNotFound)
		})
	}
}

// A create whose own configuration (the bootstrap's env here) is over
// MaxCreateConfigBytes answers invalid and creates nothing.
func TestCreateWithHugeConfigIsInvalid(t *testing.T) {
	e := newEnv(t)
	c := e.call()
	b := e.sleeper()
	b.Env = map[string]string{}
	for i := 0; i < 10; i++ {
		b.Env[fmt.Sprintf("BIG_%d", i)] = strings.Repeat("y", 64<<10)
	}
	_, err := e.p.Create(ctx(t), c, b)
	wantCode(t, "create with 640 KiB of env", err, proto.ErrInvalid)
	if !errors.Is(err, errCreateConfigTooLarge) {
		t.Fatalf("create: %v, want the configuration's size as the cause", err)
	}
	_, err = e.p.GetInfo(ctx(t), c)
	wantCode(t, "info after the refused create", err, proto.ErrNotFound)
}

// A container with the sandbox's name whose image carries 8 MiB of
// labels (made with the engine directly, not by this provider): info
// reads at most MaxInspectBytes of the engine's answer and fails with
// ErrInspectTooLarge, allocating far less than the labels.
func TestInfoOfHugeLabelledContainerIsBounded(t *testing.T) {
	e := newEnv(t)
	const size = 8 << 20
	img := e.hugeLabelImage(t, size)
	c := e.call()
	if _, err := e.cli.ContainerCreate(ctx(t), &container.Config{Image: img, Labels: e.p.labels(c, 1, e.p.cfg.Now())},
		nil, nil, nil, containerName(c.Reference, 1)); err != nil {
		t.Fatal(err)
	}
	var err error
	alloc := memtest.AllocatedDuring(func() { _, err = e.p.GetInfo(ctx(t), c) })
	if !errors.Is(err, ErrInspectTooLarge) {
		t.Fatalf("info: %v, want ErrInspectTooLarge", err)
	}
	if alloc > 6*MaxInspectBytes {
		t.Fatalf("info allocated %d bytes reading a container with %d bytes of labels; want at most %d", alloc, size, 6*MaxInspectBytes)
	}
}

// A sandbox from an image with 192 KiB of labels (under
// MaxImageConfigBytes) given compute after compute stays readable and
// killable: the list of its compute containers carries the image's labels
// once per container, so a new compute whose list would pass
// MaxInspectBytes is refused as invalid instead of made.
func TestComputesOfLabelledImageStayReadable(t *testing.T) {
	e := newEnv(t)
	img := e.hugeLabelImage(t, 192<<10)
	c := e.call()
	if _, err := e.p.Create(ctx(t), c, proto.Bootstrap{Image: img, Entrypoint: []string{"sleep", "3600"}}); err != nil {
		t.Fatalf("create from an image with 192 KiB of labels: %v", err)
	}
	made, refused := 1, 0
	for gen := int64(2); gen <= 8; gen++ {
		_, err := e.p.NewCompute(ctx(t), c, gen, nil)
		switch {
		case err == nil:
			made++
		case provider.CodeOf(err) == proto.ErrInvalid && errors.Is(err, errComputesTooLarge):
			refused++
		default:
			t.Fatalf("new compute %d (%d made): %v", gen, made, err)
		}
	}
	t.Logf("%d computes made, %d refused", made, refused)
	if refused == 0 {
		t.Fatalf("all %d computes made; want the ones past the list bound refused", made)
	}
	if _, err := e.p.GetInfo(ctx(t), c); err != nil {
		t.Fatalf("info with %d computes: %v", made, err)
	}
	if err := e.p.Kill(ctx(t), c); err != nil {
		t.Fatalf("kill with %d computes: %v", made, err)
	}
	_, err := e.p.GetInfo(ctx(t), c)
	wantCode(t, "info after kill", err, proto.ErrNotFound)
}
