package lifecycle

import (
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Gone reports whether a sandbox in lifecycle state st (a State*
// constant) no longer exists for an E2B caller: Deleting and
// CleanupFailed are sandboxes the caller killed (or whose create failed)
// that corectl is still revoking, which E2B's API answers as a sandbox
// that is not there (404 on GET, absent from lists). Connect and the
// network routes keep refusing them with 409 (spec §5.3); only the E2B
// read routes use Gone.
func Gone(st string) bool { return st == StateDeleting || st == StateCleanupFailed }

// goneObject is Gone for a BatchSandbox read from the apiserver: its
// recorded state, or a deletion already under way.
func goneObject(u *unstructured.Unstructured) bool {
	return u.GetDeletionTimestamp() != nil || Gone(u.GetAnnotations()[v1alpha1.AnnotationLifecycle])
}
