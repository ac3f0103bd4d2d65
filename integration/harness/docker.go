package harness

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/sandgate/sandgate/nodeagent/docker"
)

// DockerClient returns a client of the Docker engine DOCKER_HOST names
// (the private engine hack/docker/start.sh runs; make test exports it)
// and that address, closed when t ends. It fails t when DOCKER_HOST is
// unset or the client cannot be made: the tests that run nodeagent on a
// real engine must not pass without one.
func DockerClient(t testing.TB) (*client.Client, string) {
	t.Helper()
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		t.Fatal("DOCKER_HOST is unset: this test runs nodeagent on a real Docker engine; export DOCKER_HOST=$(bash hack/docker/start.sh) (make test does this)")
	}
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, host
}

// RemoveNodeContainers removes, forcibly, the containers nodeagent made
// for node id (label docker.LabelNodeID) and only those: tests share the
// engine. Errors are ignored (a cleanup); it gives up after 30 s.
func RemoveNodeContainers(cli *client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", docker.LabelNodeID+"="+id))})
	if err != nil {
		return
	}
	for _, c := range list {
		_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
}
