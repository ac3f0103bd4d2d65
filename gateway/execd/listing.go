package execd

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
)

// listScript prints the entries below "$1" (relative to the command's
// working directory) down to "$2" levels as NUL-terminated records: a type
// letter (d directory, f regular file, l symlink, o anything else) and the
// path. Symlinks are listed, not followed. It exits 4 when "$1" does not
// exist, 3 when it is a symlink and 2 when it is not a directory, which are
// the refusals of execd's /directories/list. Only POSIX sh is used (execd
// runs sh where there is no bash); each directory is read in a subshell, so
// the recursion keeps its own loop variable.
const listScript = `b=$1 n=$2
[ -e "$b" ] || [ -L "$b" ] || exit 4
[ -L "$b" ] && exit 3
[ -d "$b" ] || exit 2
l() (
	for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		if [ -L "$e" ]; then printf 'l%s\0' "$e"
		elif [ -d "$e" ]; then
			printf 'd%s\0' "$e"
			if [ "$2" -gt 1 ]; then l "$e" $(($2 - 1)); fi
		elif [ -f "$e" ]; then printf 'f%s\0' "$e"
		elif [ -e "$e" ]; then printf 'o%s\0' "$e"
		fi
	done
)
l "$b" "$n"
`

// symlinkRefusal begins execd HEAD's refusal to list a directory that is a
// symlink (400 INVALID_REQUEST_BODY, the path after it), which
// listWithShell gives too.
const symlinkRefusal = "path is a symbolic link, refusing to traverse: "

// isSymlinkRefusal reports whether err is execd's refusal to list a
// symlink (symlinkRefusal).
func isSymlinkRefusal(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindExecd && e.Status == http.StatusBadRequest && strings.HasPrefix(e.Message, symlinkRefusal)
}

// maxInfoQuery bounds the query of one GET /files/info (bytes), so a long
// listing is stat'ed in several requests that every proxy accepts.
const maxInfoQuery = 16 << 10

// listWithShell is the directory listing for an execd without
// /directories/list (v1.0.18, docs/wire-facts.md §X1.6). execd v1.0.18 lists
// regular files only (/files/search, recursively, whatever the depth, and
// failing whole on a file whose owner has no name), so no file API can show
// a directory, let alone an empty one. The entries and their types come
// from a POSIX sh script run with POST /command, whose working directory is
// dir's parent (execd resolves it; the script uses relative paths), down to
// depth levels; the metadata of directories and regular files from
// GET /files/info (batched), which v1.0.18 has. The answer is in
// /directories/list's order and shape: lexical by path component, each
// directory's entries right after it, FileInfo.Type set. Symlinks and other
// entries carry their path and type only (v1.0.18's /files/info follows
// symlinks and fails on a dangling one); envd's SDKs leave both out of
// list() anyway. An entry removed between the two calls is left out.
//
// With follow, dir itself is the working directory and "." is listed: a
// dir that is a symlink to a directory is listed through (as envd's
// ListDir does), its entries under dir. A dir that then does not resolve
// to a directory is KindNotFound when nothing is there (a dangling link,
// a loop) and NOT_A_DIRECTORY's refusal when something else is (one more
// command, FollowedType, on that error path only).
func (c *Client) listWithShell(ctx context.Context, t Target, dir string, depth int, follow bool) ([]FileInfo, error) {
	parent, base := path.Split(dir)
	if dir == "/" || follow {
		parent, base = dir, "."
	}
	res, err := c.Shell(ctx, t, c.listingBytes(), parent, listScript, base, strconv.Itoa(depth))
	var e *Error
	if errors.As(err, &e) && e.Kind == KindExecd && e.Status == http.StatusBadRequest {
		// execd refuses a working directory that does not exist or is not
		// a directory: then dir does not exist either, or (following it)
		// is not a directory.
		if follow {
			if typ, err := c.FollowedType(ctx, t, dir); err == nil && typ != TypeDirectory {
				return nil, &Error{Kind: KindExecd, Status: http.StatusBadRequest, Code: "INVALID_REQUEST_BODY", Message: "path is not a directory: " + dir}
			}
		}
		return nil, &Error{Kind: KindNotFound, Status: http.StatusNotFound, Code: "FILE_NOT_FOUND", Message: "directory not found: " + dir}
	}
	if err != nil {
		return nil, err
	}
	switch res.ExitCode {
	case 0:
	case 4:
		return nil, &Error{Kind: KindNotFound, Status: http.StatusNotFound, Code: "FILE_NOT_FOUND", Message: "directory not found: " + dir}
	case 3:
		return nil, &Error{Kind: KindExecd, Status: http.StatusBadRequest, Code: "INVALID_REQUEST_BODY", Message: symlinkRefusal + dir}
	case 2:
		return nil, &Error{Kind: KindExecd, Status: http.StatusBadRequest, Code: "INVALID_REQUEST_BODY", Message: "path is not a directory: " + dir}
	default:
		return nil, &Error{Kind: KindExecd, Status: http.StatusInternalServerError, Code: "RUNTIME_ERROR",
			Message: "listing " + dir + " with a shell script failed with exit status " + strconv.Itoa(res.ExitCode)}
	}
	if n := bytes.Count(res.Stdout, []byte{0}); n > c.listingEntries() {
		return nil, &Error{Kind: KindUnexpected, Message: "the listing script printed more than " + strconv.Itoa(c.listingEntries()) + " entries (the gateway's max_listing_entries)"}
	}
	var list []FileInfo
	var stat []string
	for _, rec := range bytes.Split(res.Stdout, []byte{0}) {
		if len(rec) == 0 || string(rec) == "\n" {
			continue // the line end Shell adds after the last record
		}
		typ := map[byte]string{'d': TypeDirectory, 'f': TypeFile, 'l': TypeSymlink, 'o': TypeOther}[rec[0]]
		if typ == "" || len(rec) < 2 {
			return nil, &Error{Kind: KindUnexpected, Message: "the listing script printed a record it does not print"}
		}
		p := path.Join(parent, string(rec[1:]))
		list = append(list, FileInfo{Path: p, Type: typ})
		if typ == TypeDirectory || typ == TypeFile {
			stat = append(stat, p)
		}
	}
	infos, err := c.statMany(ctx, t, stat)
	if err != nil {
		return nil, err
	}
	out := list[:0]
	for _, fi := range list {
		if fi.Type == TypeDirectory || fi.Type == TypeFile {
			info, ok := infos[fi.Path]
			if !ok {
				continue // gone since the script saw it
			}
			info.Path, info.Type = fi.Path, fi.Type
			fi = info
		}
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return pathLess(out[i].Path, out[j].Path) })
	return out, nil
}

// pathLess orders paths as a depth-first walk of lexically sorted
// directories does: component by component.
func pathLess(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(as) && i < len(bs); i++ {
		if as[i] != bs[i] {
			return as[i] < bs[i]
		}
	}
	return len(as) < len(bs)
}

// statMany calls GET /files/info for paths in batches of at most
// maxInfoQuery query bytes and returns the entries by path. A batch that
// fails because a path is gone is retried path by path, leaving the gone
// ones out.
func (c *Client) statMany(ctx context.Context, t Target, paths []string) (map[string]FileInfo, error) {
	out := make(map[string]FileInfo, len(paths))
	for len(paths) > 0 {
		n, size := 0, 0
		for n < len(paths) && (n == 0 || size+len(url.QueryEscape(paths[n]))+6 <= maxInfoQuery) {
			size += len(url.QueryEscape(paths[n])) + 6
			n++
		}
		batch := paths[:n]
		paths = paths[n:]
		m, err := c.info(ctx, t, batch)
		if IsNotFound(err) && len(batch) > 1 {
			for _, p := range batch {
				one, err := c.info(ctx, t, []string{p})
				if IsNotFound(err) {
					continue
				}
				if err != nil {
					return nil, err
				}
				out[p] = one[p]
			}
			continue
		}
		if IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for p, fi := range m {
			out[p] = fi
		}
	}
	return out, nil
}

// typeScript exits 2 when "$1" (relative to the command's working
// directory) is a directory, 1 a regular file, 3 anything else, 4 nothing;
// symlinks are followed, as v1.0.18's /files/info follows them.
const typeScript = `if [ -d "$1" ]; then exit 2; elif [ -f "$1" ]; then exit 1; elif [ -e "$1" ]; then exit 3; fi; exit 4`

// FollowedType returns the type of p with symlinks followed (TypeFile,
// TypeDirectory or TypeOther), which execd v1.0.18's FileInfo does not
// carry and HEAD's reports only for the link itself: a POSIX sh test run
// with POST /command in p's parent. A missing p is KindNotFound.
func (c *Client) FollowedType(ctx context.Context, t Target, p string) (string, error) {
	parent, base := path.Split(p)
	if p == "/" {
		return TypeDirectory, nil
	}
	res, err := c.Shell(ctx, t, 4<<10, parent, typeScript, base)
	var e *Error
	if errors.As(err, &e) && e.Kind == KindExecd && e.Status == http.StatusBadRequest {
		return "", &Error{Kind: KindNotFound, Status: http.StatusNotFound, Code: "FILE_NOT_FOUND", Message: "file not found: " + p}
	}
	if err != nil {
		return "", err
	}
	switch res.ExitCode {
	case 2:
		return TypeDirectory, nil
	case 1:
		return TypeFile, nil
	case 3:
		return TypeOther, nil
	case 4:
		return "", &Error{Kind: KindNotFound, Status: http.StatusNotFound, Code: "FILE_NOT_FOUND", Message: "file not found: " + p}
	}
	return "", &Error{Kind: KindExecd, Status: http.StatusInternalServerError, Code: "RUNTIME_ERROR",
		Message: "testing the type of " + p + " failed with exit status " + strconv.Itoa(res.ExitCode)}
}
