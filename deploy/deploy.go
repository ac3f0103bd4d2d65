// Package deploy holds what runs sandgate outside a laptop: the container
// image build files of the three programs (images/, built by
// hack/images.sh and `make images`) and the Kubernetes manifests
// (docs/deploy.md). Its tests build the images with the Docker engine of
// DOCKER_HOST and run each binary inside its image.
package deploy
