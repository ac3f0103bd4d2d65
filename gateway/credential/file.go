package credential

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/sandgate/sandgate/internal/filewatch"
)

// File is a Source backed by a JSON or YAML file (format: see OpenFile),
// reloaded when the file changes. Lookup is lock-free: it reads the
// immutable map of the file's last good version (filewatch.Snapshot).
type File struct {
	*filewatch.Snapshot[map[string]Credential]
	done <-chan struct{} // closed when the watch goroutine has exited
}

var _ Source = (*File)(nil)

// OpenFile loads the credential file at path and starts watching it.
//
// Format: JSON or YAML, {"credentials": [{"id": …, "enabled": …,
// "resourceSpecId": …, "resourceGroupId": …, "projectNamespace": …,
// "clusterId": …, "projectWide": …}, …]} (projectWide optional, default
// false), decoded strictly (unknown fields, duplicate keys,
// wrong types, duplicate IDs and invalid credentials are errors), at most
// MaxFileSize bytes.
//
// Reloading (package filewatch): the parent directory is watched with
// fsnotify, so in-place writes, editors' atomic rename-over and Kubernetes
// ConfigMap/Secret "..data" symlink swaps are all seen. Events are debounced
// (50 ms, at most 500 ms under a continuous stream) and the file is re-read;
// a change is therefore applied well within 1 s. A reload that fails
// (unreadable or invalid) keeps the previous credentials, records the
// reason for LastError and logs a warning with the path and reason (never
// file contents) on logger (nil means no logging). A file that has been
// missing for filewatch.DefaultMissingGrace (5 s) revokes every
// credential: the empty list is served until the file is back. Version
// counts the versions served; Stats says whether the file on disk is what
// is served (for the staleness metric).
//
// Errors: the os error (e.g. fs.ErrNotExist) or an ErrInvalid-wrapped
// reason, prefixed with the path; or the fsnotify error if the directory
// cannot be watched. Call Close to stop watching.
func OpenFile(path string, logger *zap.Logger) (*File, error) {
	s, err := filewatch.Open(path, filewatch.Options[map[string]Credential]{What: "credential file",
		MaxSize: MaxFileSize, Parse: parse, Count: func(m map[string]Credential) int { return len(m) },
		Empty: map[string]Credential{}, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &File{Snapshot: s, done: s.Done()}, nil
}

// Lookup returns the credential with the given id from the most recently
// loaded version of the file. Errors wrap ErrNotFound (no such id) or
// ErrDisabled (enabled=false; the credential is returned too); File never
// returns ErrUnavailable. ctx is not used: the lookup is an in-memory read.
// Lookup keeps serving the last version after Close.
func (f *File) Lookup(_ context.Context, id string) (Credential, error) {
	if err := checkLookupID(id); err != nil {
		return Credential{}, err
	}
	c, ok := f.Load()[id]
	if !ok {
		return Credential{}, fmt.Errorf("%w: credential %q", ErrNotFound, id)
	}
	return answer(c)
}
