package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/provider"
)

// MaxInspectBytes bounds the body of every answer of the Docker Engine's
// JSON read endpoints the provider calls (GET …/json: container and image
// inspect, container list, exec inspect): 1 MiB. Those answers carry what
// a sandbox image sets (labels, env, cmd, healthcheck…, which a container
// inherits), so they are the tenant's; the provider reads at most this
// many bytes of one and fails with ErrInspectTooLarge past it, before
// decoding more. Docker's own fields of an inspect are a few KiB.
const MaxInspectBytes = 1 << 20

// MaxImageConfigBytes bounds the image inspect of a create's image
// (256 KiB), and MaxCreateConfigBytes the JSON of the container
// configuration a create or new_compute sends (512 KiB): a create over
// either answers invalid and creates nothing, so every container the
// provider makes stays readable under MaxInspectBytes (its inspect is
// the image's configuration, the create's and Docker's own few KiB).
const (
	MaxImageConfigBytes  = 256 << 10
	MaxCreateConfigBytes = 512 << 10
)

// ErrInspectTooLarge is the error of a Docker JSON answer longer than
// MaxInspectBytes (errors.Is), returned by the Docker client's call.
var ErrInspectTooLarge = fmt.Errorf("docker: the engine's answer exceeds %d bytes (a sandbox image's labels, env or cmd too large)", MaxInspectBytes)

// boundedTransport limits the bodies of the JSON read answers (GET of a
// path ending in /json) to MaxInspectBytes; other answers (image load
// progress, exec output) pass unchanged. The Docker client's hijacked
// exec attach does not go through it.
type boundedTransport struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (b boundedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(r)
	if err != nil || r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/json") {
		return resp, err
	}
	resp.Body = limitedBody{http.MaxBytesReader(nil, resp.Body, MaxInspectBytes)}
	return resp, nil
}

// limitedBody is an answer's body read through http.MaxBytesReader, whose
// error past the limit it gives as ErrInspectTooLarge.
type limitedBody struct{ io.ReadCloser }

func (l limitedBody) Read(p []byte) (int, error) {
	n, err := l.ReadCloser.Read(p)
	if _, over := err.(*http.MaxBytesError); over {
		err = ErrInspectTooLarge
	}
	return n, err
}

// errImageConfigTooLarge and errCreateConfigTooLarge are the causes of a
// create refused for its size (invalid).
var (
	errImageConfigTooLarge  = fmt.Errorf("docker: the image's configuration (labels, env, cmd…) exceeds %d bytes", MaxImageConfigBytes)
	errCreateConfigTooLarge = fmt.Errorf("docker: the container configuration exceeds %d bytes", MaxCreateConfigBytes)
	errComputesTooLarge     = fmt.Errorf("docker: one more compute container would make the sandbox's container list exceed %d bytes", MaxInspectBytes)
)

// checkCreateSize refuses, as invalid, a create whose image (inspected,
// at most MaxInspectBytes read) has a configuration over
// MaxImageConfigBytes or whose own configuration encodes to more than
// MaxCreateConfigBytes. An image the engine does not have answers invalid
// as ContainerCreate's NotFound does.
func (p *Provider) checkCreateSize(ctx context.Context, cfg *container.Config, host *container.HostConfig) error {
	b, err := json.Marshal(struct {
		*container.Config
		HostConfig *container.HostConfig
	}{cfg, host})
	if err != nil {
		return err
	}
	if len(b) > MaxCreateConfigBytes {
		return provider.Fail(proto.ErrInvalid, errCreateConfigTooLarge)
	}
	var raw bytes.Buffer
	_, err = p.cli.ImageInspect(ctx, cfg.Image, client.ImageInspectWithRawResponse(&raw))
	switch {
	case errors.Is(err, ErrInspectTooLarge):
		return provider.Fail(proto.ErrInvalid, errImageConfigTooLarge)
	case cerrdefs.IsNotFound(err):
		return provider.Fail(proto.ErrInvalid, err)
	case err != nil:
		return err
	case raw.Len() > MaxImageConfigBytes:
		return provider.Fail(proto.ErrInvalid, errImageConfigTooLarge)
	}
	return nil
}

// listEntryOverhead is what a container's entry in the engine's container
// list holds besides its labels (bytes): Docker's own fields (names,
// command, ports, mounts, network settings) are a few KiB, 16 KiB leaves
// room.
const listEntryOverhead = 16 << 10

// checkComputesSize refuses, as invalid, one more compute container for a
// sandbox that has n, each carrying labels (the image's and the
// provider's, as the current compute's inspect gives them): the list of
// the sandbox's compute containers (GET /containers/json, which every
// operation on the sandbox reads first) carries each container's labels,
// so it must stay under MaxInspectBytes for the sandbox to stay readable
// and killable. An image with 192 KiB of labels so gets 4 computes at
// once, an image with few labels about 60.
func checkComputesSize(n int, labels map[string]string) error {
	b, err := json.Marshal(labels)
	if err != nil {
		return err
	}
	if (n+1)*(len(b)+listEntryOverhead) > MaxInspectBytes {
		return provider.Fail(proto.ErrInvalid, errComputesTooLarge)
	}
	return nil
}
