package execd

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
)

// Link is what a symlink of a directory listing resolves to, as envd
// reports it in ListDir: the type and permission bits of what it points to
// with every link followed, and that target's path.
type Link struct {
	// Type is TypeFile, TypeDirectory or TypeOther for the target with
	// every link followed; empty when the link resolves to nothing (its
	// target is missing, or the links loop).
	Type string
	// Perm is the target's permission bits (0o755); 0 when Type is empty.
	Perm uint32
	// Target is the target's absolute path with every link resolved
	// (readlink -f); empty when Type is empty, or when the sandbox could
	// not tell it (no readlink -f, or a "\r" in it).
	Target string
}

// linkScript prints, for each symlink below the command's working
// directory (the listed directory) down to "$1" levels (the same walk as
// listScript: symlinks are not descended into), three
// NUL-terminated fields: its path ("./" and the path below the directory),
// a type letter (d directory, f regular file, o anything else, each with
// every link followed, then ls -dLl's mode field; n alone when it resolves
// to nothing: a missing target or a loop) and its target with every link
// resolved (readlink -f; for a directory without readlink, cd -P and
// pwd -P; empty when neither tells it). A symlink whose path holds a "\r",
// which execd's output lines split at, is left out, and a target holding
// one is printed empty. Only POSIX sh and ls are needed (readlink -f is in
// GNU coreutils and busybox); the names come from the file system, never
// from the script's text.
const linkScript = `n=$1 cr=$(printf '\r') nl='
'
r() (
	for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		if [ -L "$e" ]; then
			case $e in *"$cr"*) continue ;; esac
			if [ -d "$e" ]; then k=d; elif [ -f "$e" ]; then k=f; elif [ -e "$e" ]; then k=o; else k=n; fi
			m= t=
			if [ $k != n ]; then
				if m=$(ls -dLl "$e" 2>/dev/null); then m=${m%% *}; else k=n m=; fi
			fi
			if [ $k != n ]; then
				if t=$(readlink -f "$e" 2>/dev/null && echo .); then :
				elif [ $k = d ] && t=$(cd -P "$e" 2>/dev/null && pwd -P && echo .); then :
				else t=
				fi
				t=${t%.} && t=${t%"$nl"}
				case $t in /*) ;; *) t= ;; esac
				case $t in *"$cr"*) t= ;; esac
			fi
			printf '%s\0%s%s\0%s\0' "$e" $k "$m" "$t"
		elif [ -d "$e" ]; then
			if [ "$2" -gt 1 ]; then r "$e" $(($2 - 1)); fi
		fi
	done
)
r . "$n"
`

// listHasLink reports whether list holds a symlink.
func listHasLink(list []FileInfo) bool {
	for i := range list {
		if list[i].Type == TypeSymlink {
			return true
		}
	}
	return false
}

// viewsHaveLink reports whether a plain listing holds a symlink.
func viewsHaveLink(views []FileInfoView) bool {
	for i := range views {
		if string(views[i].Type) == TypeSymlink {
			return true
		}
	}
	return false
}

// resolveLinks sets Link on the symlinks of list, the listing of dir down
// to depth levels: one POST /command running linkScript in dir (as
// execd's own identity, as listWithShell does), its output bounded by
// max_listing_size and max_listing_entries records (ParseLinks). A symlink
// the script did not report keeps a nil Link. A directory gone since the
// listing is KindNotFound; output that is not the script's is KindUnexpected.
func (c *Client) resolveLinks(ctx context.Context, t Target, dir string, depth int, list []FileInfo) error {
	res, err := c.Shell(ctx, t, c.listingBytes(), dir, linkScript, strconv.Itoa(max(depth, 1)))
	var e *Error
	if errors.As(err, &e) && e.Kind == KindExecd && e.Status == http.StatusBadRequest {
		return &Error{Kind: KindNotFound, Status: http.StatusNotFound, Code: "FILE_NOT_FOUND", Message: "directory not found: " + dir}
	}
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &Error{Kind: KindExecd, Status: http.StatusInternalServerError, Code: "RUNTIME_ERROR",
			Message: "resolving the symlinks of " + dir + " with a shell script failed with exit status " + strconv.Itoa(res.ExitCode)}
	}
	links, err := ParseLinks(res.Stdout, c.listingEntries())
	if err != nil {
		return err
	}
	prefix := path.Clean(dir)
	if prefix != "/" {
		prefix += "/"
	}
	for i := range list {
		if list[i].Type != TypeSymlink {
			continue
		}
		rel, ok := strings.CutPrefix(path.Clean(list[i].Path), prefix)
		if !ok {
			continue
		}
		if l, ok := links[rel]; ok {
			list[i].Link = &l
		}
	}
	return nil
}

// errLinkRecord is ParseLinks' refusal of output linkScript does not print.
var errLinkRecord = &Error{Kind: KindUnexpected, Message: "the symlink script printed a record it does not print"}

// ParseLinks reads linkScript's output as Shell returns it (a "\n" after
// the last record): the symlinks by their path relative to the listed
// directory (the record's path without its "./"), so what the map holds
// is bounded by out's size, whatever the directory's length. More than
// maxRecords records, a record whose path is not "./" and a clean
// relative path below it, whose type letter or mode field is not the
// script's, or whose target is neither empty nor absolute is an *Error
// with KindUnexpected, as is anything after the last record.
func ParseLinks(out []byte, maxRecords int) (map[string]Link, error) {
	out = bytes.TrimSuffix(out, []byte{'\n'})
	links := make(map[string]Link)
	for n := 0; len(out) > 0; n++ {
		if n >= maxRecords {
			return nil, &Error{Kind: KindUnexpected, Message: "the symlink script printed more than " + strconv.Itoa(maxRecords) + " records (the gateway's max_listing_entries)"}
		}
		var f [3][]byte
		for i := range f {
			end := bytes.IndexByte(out, 0)
			if end < 0 {
				return nil, errLinkRecord
			}
			f[i], out = out[:end], out[end+1:]
		}
		rel, ok := strings.CutPrefix(string(f[0]), "./")
		if !ok || rel == "." || !fs.ValidPath(rel) { // ValidPath: no leading '/', no empty, "." or ".." element
			return nil, errLinkRecord
		}
		l, ok := parseLinkInfo(f[1], f[2])
		if !ok {
			return nil, errLinkRecord
		}
		links[rel] = l
	}
	return links, nil
}

// parseLinkInfo reads a record's type field (a type letter and ls's mode
// field, or n alone) and target.
func parseLinkInfo(info, target []byte) (Link, bool) {
	if len(info) == 1 && info[0] == 'n' {
		return Link{}, len(target) == 0
	}
	// The type letter, then ls's mode field: a file type letter, nine
	// permission letters, and maybe one more (".", "+" or "@").
	if len(info) < 11 || len(info) > 12 {
		return Link{}, false
	}
	var l Link
	switch info[0] {
	case 'd':
		l.Type = TypeDirectory
	case 'f':
		l.Type = TypeFile
	case 'o':
		l.Type = TypeOther
	default:
		return Link{}, false
	}
	if !strings.Contains("-dcbps", string(info[1:2])) || len(info) == 12 && !strings.Contains(".+@", string(info[11:])) {
		return Link{}, false
	}
	for i, ch := range info[2:11] {
		bit := uint32(1) << (8 - i)
		switch {
		case ch == "rwxrwxrwx"[i]:
			l.Perm |= bit
		case ch == '-':
		case i%3 == 2 && (i < 6 && ch == 's' || i == 8 && ch == 't'):
			l.Perm |= bit // setuid, setgid or sticky over x
		case i%3 == 2 && (i < 6 && ch == 'S' || i == 8 && ch == 'T'):
		default:
			return Link{}, false
		}
	}
	if len(target) > 0 && target[0] != '/' {
		return Link{}, false
	}
	l.Target = string(target)
	return l, true
}
