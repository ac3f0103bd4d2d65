package apikey

import (
	"github.com/sandgate/sandgate/internal/filewatch"
	"go.uber.org/zap"
)

// File is a Source backed by the key file, reloaded when the file changes
// (package filewatch, as the gateway's credential files): Lookup reads the
// last good version, lock-free.
type File struct {
	*filewatch.Snapshot[*Keys]
}

// OpenFile loads the key file at path (Parse's format, at most MaxFileSize
// bytes) and starts watching it.
//
// Reloading: the file's directory is watched with fsnotify, so in-place
// writes, rename-over and Kubernetes Secret/ConfigMap "..data" swaps are
// seen; a change is applied within about half a second (filewatch's
// debounce), so a key removed or changed in the file is refused from then
// on. A version that cannot be read or does not parse keeps the last good
// one: the reason (Parse's error, which names the entry index but never a
// digest) is logged as a warning on logger (nil: not logged) and kept for
// LastError, and Stats().FailingSince says since when the file on disk is
// not what is served (corectl's metrics export it). A file missing for
// filewatch.DefaultMissingGrace (5 s) serves no key at all until it is
// back, so deleting the file revokes every key.
//
// Errors: the os error of the first read (a missing file included), or an
// ErrInvalid-wrapped reason, prefixed with the path; or the fsnotify error
// if the directory cannot be watched. Close stops watching.
func OpenFile(path string, logger *zap.Logger) (*File, error) {
	s, err := filewatch.Open(path, filewatch.Options[*Keys]{What: "API key file", MaxSize: MaxFileSize,
		Parse: Parse, Count: func(k *Keys) int { return len(k.entries) }, Empty: &Keys{}, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &File{Snapshot: s}, nil
}

// Lookup finds the entry of a presented key in the last good version of
// the file (Keys.Lookup). Errors: ErrMissing, ErrUnknown.
func (f *File) Lookup(key string) (Entry, error) { return f.Load().Lookup(key) }
