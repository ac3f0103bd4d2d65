package v1alpha1

import (
	"embed"
	"fmt"
	"io/fs"
	"path"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed crds/*.yaml
var crdFiles embed.FS

// CRDs returns the CustomResourceDefinitions of this package's resources
// (nodepools, nodeenrolmenttokens, enrollednodes and nodeplacements in
// nodes.sandgate.io), decoded strictly from crds/. The error reports a
// manifest that does not decode (a build defect).
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(crdFiles, "crds/*.yaml")
	if err != nil {
		return nil, err
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, n := range names {
		data, err := crdFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &crd); err != nil {
			return nil, fmt.Errorf("v1alpha1: %s: %w", path.Base(n), err)
		}
		if crd.Kind != "CustomResourceDefinition" || crd.Spec.Group != Group {
			return nil, fmt.Errorf("v1alpha1: %s is not a CustomResourceDefinition of %s", path.Base(n), Group)
		}
		out = append(out, &crd)
	}
	return out, nil
}
