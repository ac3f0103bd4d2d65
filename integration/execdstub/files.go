package execdstub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Permission is the ownership part of FileInfo and of upload / mkdir
// metadata (§X1.3, §X1.5). Owner and Group are user/group names (numeric ids
// as strings when the name is unknown); Mode is an int whose decimal digits
// are the octal permission, e.g. 644 for rw-r--r--.
type Permission struct {
	// Owner is a user name, or a numeric uid as a string.
	Owner string `json:"owner"`
	// Group is a group name, or a numeric gid as a string.
	Group string `json:"group"`
	// Mode is the permission written as octal digits in a decimal int
	// (644 = 0o644); 0 means "leave unchanged" in requests.
	Mode int `json:"mode"`
}

// FileInfo is execd's file description (§X1.3). Path is the absolute
// sandbox path; Type (file, directory, symlink or other) exists on HEAD
// only and is omitted on v1.0.18; Size is in bytes; ModifiedAt is the
// mtime and CreatedAt the ctime (status change time, which execd reports as
// "created"), both RFC3339Nano in UTC.
type FileInfo struct {
	// Path is the absolute, cleaned sandbox path.
	Path string `json:"path,omitempty"`
	// Type is file, directory, symlink or other; empty on v1.0.18.
	Type string `json:"type,omitempty"`
	// Size is the size in bytes (of the link itself for a symlink on HEAD).
	Size int64 `json:"size"`
	// ModifiedAt is the modification time (UTC).
	ModifiedAt time.Time `json:"modified_at,omitempty"`
	// CreatedAt is the inode change time (UTC), which execd calls created.
	CreatedAt time.Time `json:"created_at,omitempty"`
	// Permission holds owner, group and mode, flattened into the object.
	Permission
}

// FileMetadata is the JSON content of an upload's metadata part (§X1.5):
// Path is the target sandbox path (required); Mode 0 means no chmod;
// unknown Owner/Group names are ignored.
type FileMetadata struct {
	// Path is the target sandbox path (required).
	Path string `json:"path,omitempty"`
	// Permission holds owner, group and mode, flattened into the object.
	Permission
}

// handleFileError is execd's handleFileError: not-found errors are 404
// FILE_NOT_FOUND "file not found. <err>", others 500 RUNTIME_ERROR
// "error accessing file: <err>".
func (s *Server) handleFileError(w http.ResponseWriter, err error) {
	if s.isNotExist(err) {
		writeError(w, http.StatusNotFound, CodeFileNotFound, fmt.Sprintf("file not found. %v", err))
		return
	}
	writeError(w, http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error accessing file: %v", err))
}

func fileType(fi os.FileInfo) string {
	switch m := fi.Mode(); {
	case m&os.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "file"
	}
	return "other"
}

// buildFileInfo describes fi found at sandbox path abs. An owner or group
// without a name is given as its numeric id, except in v1.0.18's
// /files/search (strictOwner), which fails on it (its GetFileInfo, behind
// /files/info, falls back to the id like HEAD).
func (s *Server) buildFileInfo(abs string, fi os.FileInfo, strictOwner bool) (FileInfo, error) {
	st, _ := fi.Sys().(*syscall.Stat_t)
	var uid, gid string
	ctime := fi.ModTime()
	if st != nil {
		uid = strconv.FormatUint(uint64(st.Uid), 10)
		gid = strconv.FormatUint(uint64(st.Gid), 10)
		ctime = time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))
	}
	owner, group := uid, gid
	if u, err := user.LookupId(uid); err == nil {
		owner = u.Username
	} else if strictOwner {
		return FileInfo{}, fmt.Errorf("error lookup owner for file %s: %w", abs, err)
	}
	if g, err := user.LookupGroupId(gid); err == nil {
		group = g.Name
	} else if strictOwner {
		return FileInfo{}, fmt.Errorf("error lookup group for file %s: %w", abs, err)
	}
	mode, _ := strconv.Atoi(strconv.FormatUint(uint64(fi.Mode().Perm()), 8))
	info := FileInfo{
		Path:       abs,
		Size:       fi.Size(),
		ModifiedAt: fi.ModTime().UTC(),
		CreatedAt:  ctime.UTC(),
		Permission: Permission{Owner: owner, Group: group, Mode: mode},
	}
	if !s.v1018 {
		info.Type = fileType(fi)
	}
	return info, nil
}

// handleFilesInfo serves GET /files/info?path=... (§X1.5). The answer maps
// each path exactly as sent to its FileInfo; no path gives {}. HEAD uses
// Lstat and answers a missing path with 404 FILE_NOT_FOUND; v1.0.18 uses
// Stat (follows symlinks) and answers 500 RUNTIME_ERROR "error accessing
// file: file not found: <path>".
func (s *Server) handleFilesInfo(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	resp := map[string]FileInfo{}
	for _, p := range r.URL.Query()["path"] {
		exp, err := s.expand(p, nil)
		if err != nil {
			s.handleFileError(w, fmt.Errorf("invalid path %s: %w", p, err))
			return
		}
		abs := sandboxAbs(exp)
		var fi os.FileInfo
		if s.v1018 {
			fi, err = os.Stat(s.HostPath(abs))
		} else {
			fi, err = os.Lstat(s.HostPath(abs))
		}
		if err != nil {
			err = fsErr(err, abs)
			switch {
			case s.v1018 && os.IsNotExist(err):
				err = fmt.Errorf("file not found: %s", p)
			case errors.Is(err, fs.ErrNotExist):
				err = fmt.Errorf("file not found: %s: %w", p, err)
			default:
				err = fmt.Errorf("error accessing file %s: %w", p, err)
			}
			s.handleFileError(w, err)
			return
		}
		info, err := s.buildFileInfo(abs, fi, false)
		if err != nil {
			s.handleFileError(w, err)
			return
		}
		resp[p] = info
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleRemoveFiles serves DELETE /files?path=... (§X1.5): missing paths are
// ignored; a directory (Stat, so a symlink to one too) stops the request
// with 500 RUNTIME_ERROR "error removing file <p>. path is a directory:
// <p>". Paths before the failing one stay deleted.
func (s *Server) handleRemoveFiles(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	for _, p := range r.URL.Query()["path"] {
		if err := s.deleteFile(p); err != nil {
			writeError(w, http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error removing file %s. %v", p, err))
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) deleteFile(p string) error {
	exp, err := s.expand(p, nil)
	if err != nil {
		return fmt.Errorf("invalid path: %w", err)
	}
	abs := sandboxAbs(exp)
	host := s.HostPath(abs)
	fi, err := os.Stat(host)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fsErr(err, abs)
	}
	if fi.IsDir() {
		return fmt.Errorf("path is a directory: %s", p)
	}
	if err := os.Remove(host); err != nil {
		return fmt.Errorf("failed to remove file: %w", fsErr(err, abs))
	}
	return nil
}

// chmodFile is execd's ChmodFile: Mode (decimal digits read as octal) is
// applied when non-zero, then ownership.
func chmodFile(host, shown string, perm Permission) error {
	if perm.Mode != 0 {
		mode, err := strconv.ParseUint(strconv.Itoa(perm.Mode), 8, 32)
		if err != nil {
			return err
		}
		if err := os.Chmod(host, os.FileMode(mode)); err != nil {
			return fsErr(err, shown)
		}
	}
	return setOwnership(host, shown, perm.Owner, perm.Group)
}

// setOwnership resolves owner and group names with os/user; unknown or
// empty names are ignored, and if neither resolves the file is chowned to
// the stub's own uid/gid, as execd does.
func setOwnership(host, shown, owner, group string) error {
	uid, gid := -1, -1
	if owner != "" {
		if u, err := user.Lookup(owner); err == nil {
			if n, err := strconv.Atoi(u.Uid); err == nil {
				uid = n
			}
		}
	}
	if group != "" {
		if g, err := user.LookupGroup(group); err == nil {
			if n, err := strconv.Atoi(g.Gid); err == nil {
				gid = n
			}
		}
	}
	if uid == -1 && gid == -1 {
		uid, gid = os.Getuid(), os.Getgid()
	}
	if err := os.Chown(host, uid, gid); err != nil {
		return fmt.Errorf("failed to set owner/group for %s: %w", shown, fsErr(err, shown))
	}
	return nil
}

// handleUpload serves POST /files/upload (§X1.5): multipart/form-data with
// parts named "metadata" and "file", paired by index. Both must be file
// parts (Content-Disposition with filename=). Errors, all JSON: not a
// parseable multipart form → 400 INVALID_FILE "multipart form is empty";
// no metadata file part → 400 INVALID_FILE_METADATA "metadata file is
// missing"; no file part → 400 INVALID_FILE_CONTENT "file is missing";
// counts differ → 400 INVALID_FILE; bad metadata JSON or empty path → 400
// INVALID_FILE_METADATA; filesystem failures → 500 RUNTIME_ERROR. Parents
// are created (0777 &^ umask), the target truncated or created (0777 &^
// umask) and fsynced, then mode/owner applied. Success: 200, empty.
func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	if err := r.ParseMultipartForm(32 << 20); err != nil || r.MultipartForm == nil {
		writeError(w, http.StatusBadRequest, CodeInvalidFile, "multipart form is empty")
		return
	}
	metas := r.MultipartForm.File["metadata"]
	files := r.MultipartForm.File["file"]
	switch {
	case len(metas) == 0:
		writeError(w, http.StatusBadRequest, CodeInvalidFileMetadata, "metadata file is missing")
		return
	case len(files) == 0:
		writeError(w, http.StatusBadRequest, CodeInvalidFileContent, "file is missing")
		return
	case len(metas) != len(files):
		writeError(w, http.StatusBadRequest, CodeInvalidFile,
			fmt.Sprintf("metadata and file count mismatch: %d vs %d", len(metas), len(files)))
		return
	}
	for i := range metas {
		if status, code, msg := s.uploadPair(metas[i], files[i]); status != 0 {
			writeError(w, status, code, msg)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) uploadPair(metaH, fileH *multipart.FileHeader) (int, string, string) {
	mf, err := metaH.Open()
	if err != nil {
		return http.StatusBadRequest, CodeInvalidFileMetadata, fmt.Sprintf("error opening metadata file. %v", err)
	}
	raw, err := io.ReadAll(mf)
	mf.Close()
	if err != nil {
		return http.StatusBadRequest, CodeInvalidFileMetadata, fmt.Sprintf("error reading metadata content. %v", err)
	}
	var meta FileMetadata
	if err := json.Unmarshal(raw, &meta); err != nil {
		return http.StatusBadRequest, CodeInvalidFileMetadata, fmt.Sprintf("invalid metadata format. %v", err)
	}
	if meta.Path == "" {
		return http.StatusBadRequest, CodeInvalidFileMetadata, "metadata path is empty"
	}
	target, err := s.expand(meta.Path, nil)
	if err != nil {
		return http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error resolving target path %s. %v", meta.Path, err)
	}
	abs := sandboxAbs(target)
	host := s.HostPath(abs)
	if err := os.MkdirAll(filepath.Dir(host), 0o777); err != nil {
		return http.StatusInternalServerError, CodeRuntimeError,
			fmt.Sprintf("error creating target directory %s. %v", filepath.Dir(target), s.hostErr(err))
	}
	src, err := fileH.Open()
	if err != nil {
		return http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error opening file %s. %v", fileH.Filename, err)
	}
	defer src.Close()
	dst, err := os.OpenFile(host, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o777)
	if err != nil {
		return http.StatusInternalServerError, CodeRuntimeError,
			fmt.Sprintf("error opening destination file %s. %v", target, fsErr(err, target))
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error copying file %s. %v", target, err)
	}
	_ = dst.Sync()
	_ = dst.Close()
	if d, err := os.Open(filepath.Dir(host)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	err = chmodFile(host, abs, meta.Permission)
	if err != nil {
		// execd retries once after 20ms for weakly-coherent filesystems.
		time.Sleep(20 * time.Millisecond)
		err = chmodFile(host, abs, meta.Permission)
	}
	if err != nil {
		return http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error chmoding file %s. %v", target, err)
	}
	return 0, "", ""
}

// hostErr rewrites a PathError whose path lies under Root to its sandbox
// path (for errors of calls like MkdirAll whose failing path is internal).
func (s *Server) hostErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Path, s.root) {
		return fsErr(err, s.sandboxPath(pe.Path))
	}
	return err
}

// httpRange is one byte range: start offset and length in bytes.
type httpRange struct{ start, length int64 }

// parseRange is execd's own Range parser (execd source ParseRange): only
// "bytes=" is accepted; "a-b", "a-" and "-n" forms; a malformed spec or
// b < a is an error (→ 416 in the caller); ranges starting at or after
// size are dropped; lengths are clipped to size.
func parseRange(spec string, size int64) ([]httpRange, error) {
	bad := errors.New("invalid range")
	rest, ok := strings.CutPrefix(spec, "bytes=")
	if !ok {
		return nil, bad
	}
	var out []httpRange
	for _, ra := range strings.Split(rest, ",") {
		ra = strings.TrimSpace(ra)
		if ra == "" {
			continue
		}
		first, last, ok := strings.Cut(ra, "-")
		if !ok {
			return nil, bad
		}
		first, last = strings.TrimSpace(first), strings.TrimSpace(last)
		var rg httpRange
		if first == "" {
			n, err := strconv.ParseInt(last, 10, 64)
			if err != nil || n < 0 {
				return nil, bad
			}
			n = min(n, size)
			rg = httpRange{start: size - n, length: n}
		} else {
			a, err := strconv.ParseInt(first, 10, 64)
			if err != nil || a < 0 {
				return nil, bad
			}
			if last == "" {
				rg = httpRange{start: a, length: size - a}
			} else {
				b, err := strconv.ParseInt(last, 10, 64)
				if err != nil || b < a {
					return nil, bad
				}
				rg = httpRange{start: a, length: b - a + 1}
			}
		}
		if rg.start >= size {
			continue
		}
		if rg.start+rg.length > size {
			rg.length = size - rg.start
		}
		out = append(out, rg)
	}
	return out, nil
}

// contentDisposition is execd's attachment header: filename="<base>", or
// for a non-ASCII name the URL-path-escaped name in both filename= and
// an RFC 5987 filename* parameter in the UTF-8 charset.
func contentDisposition(name string) string {
	for _, r := range name {
		if r > 127 {
			enc := url.PathEscape(name)
			return `attachment; filename="` + enc + `"; filename*=UTF-8''` + enc
		}
	}
	return `attachment; filename="` + name + `"`
}

// dirContent stands in for an open directory in http.ServeContent: on
// execd's ext4 a directory seeks to 2^63-1 at SEEK_END and every read fails
// (EISDIR), so the response is 200 with Content-Length
// 9223372036854775807 and no body (§X1.5); on tmpfs (noSeek,
// Config.DirectoriesOnTmpfs) the seek fails, and ServeContent answers 500
// "seeker can't seek". Emulated so that the quirk does not depend on the
// filesystem holding Root.
type dirContent struct {
	f      *os.File
	noSeek bool
}

func (d dirContent) Read(p []byte) (int, error) { return d.f.Read(p) }

func (d dirContent) Seek(offset int64, whence int) (int64, error) {
	if whence == io.SeekEnd {
		if d.noSeek {
			return 0, errors.New("seek: invalid argument")
		}
		return math.MaxInt64, nil
	}
	return offset, nil
}

// handleDownload serves GET /files/download?path= (§X1.5). Missing path
// query: 400 MISSING_QUERY; missing file: 404 FILE_NOT_FOUND. Headers
// Content-Type: application/octet-stream, Content-Disposition (see
// contentDisposition) and Content-Length are set first. A Range header is
// handled by execd's own parser: the first satisfiable range gives 206
// with Content-Range and Content-Length (no Accept-Ranges/Last-Modified); a
// malformed one gives 416 {"code":"UNKNOWN"} sent with the octet-stream
// Content-Type and the file's Content-Length still set (so the body is
// truncated or missing, as in execd); an unsatisfiable one falls through
// to http.ServeContent, which also adds Accept-Ranges and Last-Modified. A
// directory gives 200 with Content-Length 9223372036854775807 and a body
// that ends at once, breaking the connection (ext4), or with
// Config.DirectoriesOnTmpfs 500 text/plain "seeker can't seek" (tmpfs).
func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	p := queryFirst(r.URL.Query(), "path")
	if p == "" {
		writeError(w, http.StatusBadRequest, CodeMissingQuery, "missing query parameter 'path'")
		return
	}
	resolved, err := s.expand(p, nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error resolving file path: %s. %v", p, err))
		return
	}
	f, err := os.Open(s.HostPath(resolved))
	if err != nil {
		s.handleFileError(w, fsErr(err, resolved))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntimeError,
			fmt.Sprintf("error getting file stat info: %s. %v", resolved, fsErr(err, resolved)))
		return
	}
	base := filepath.Base(resolved)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", contentDisposition(base))
	h.Set("Content-Length", strconv.FormatInt(fi.Size(), 10))

	if spec := r.Header.Get("Range"); spec != "" {
		ranges, err := parseRange(spec, fi.Size())
		if err != nil {
			writeError(w, http.StatusRequestedRangeNotSatisfiable, CodeUnknown, "")
			return
		}
		if len(ranges) > 0 {
			rg := ranges[0]
			h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", rg.start, rg.start+rg.length-1, fi.Size()))
			h.Set("Content-Length", strconv.FormatInt(rg.length, 10))
			w.WriteHeader(http.StatusPartialContent)
			_, _ = f.Seek(rg.start, io.SeekStart)
			_, _ = io.CopyN(w, f, rg.length)
			return
		}
	}
	var content io.ReadSeeker = f
	if fi.IsDir() {
		content = dirContent{f: f, noSeek: s.cfg.DirectoriesOnTmpfs}
	}
	http.ServeContent(w, r, base, fi.ModTime(), content)
}

// handleSearchFiles serves GET /files/search?path=&pattern= (§X1.3, §X1.5):
// a recursive walk (symlinks not followed) returning regular files and
// other non-directories whose base name matches pattern (default "**");
// see globMatch. Missing path query: 400 MISSING_QUERY; missing dir: 404.
func (s *Server) handleSearchFiles(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	q := r.URL.Query()
	p := queryFirst(q, "path")
	if p == "" {
		writeError(w, http.StatusBadRequest, CodeMissingQuery, "missing query parameter 'path'")
		return
	}
	exp, err := s.expand(p, nil)
	if err != nil {
		// execd formats the already-cleared variable, hence the empty path.
		writeError(w, http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error converting path %s to absolute. %v", "", err))
		return
	}
	abs := sandboxAbs(exp)
	host := s.HostPath(abs)
	if _, err := os.Stat(host); err != nil {
		s.handleFileError(w, fsErr(err, abs))
		return
	}
	pattern := queryFirst(q, "pattern")
	if pattern == "" {
		pattern = "**"
	}
	files := make([]FileInfo, 0, 16)
	err = filepath.Walk(host, func(fp string, info os.FileInfo, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("error accessing path %s: %w", s.sandboxPath(fp), s.hostErr(err))
		}
		if info.IsDir() {
			return nil
		}
		ok, err := globMatch(pattern, info.Name())
		if err != nil {
			return fmt.Errorf("invalid pattern %s: %w", pattern, err)
		}
		if ok {
			fi, err := s.buildFileInfo(s.sandboxPath(fp), info, s.v1018)
			if err != nil {
				return err
			}
			files = append(files, fi)
		}
		return nil
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error searching files. %v", err))
		return
	}
	writeJSON(w, http.StatusOK, files)
}

// handleListDirectory serves GET /directories/list?path=&depth= (HEAD only,
// §X1.3, §X1.5): files and directories in lexical order, each directory's
// contents right after it, down to depth levels (default 1; 0 gives []),
// symlinks listed but not followed. Missing path query: 400 MISSING_QUERY;
// bad depth: 400 INVALID_REQUEST_BODY; missing path: 404 FILE_NOT_FOUND;
// symlink root: 400 "path is a symbolic link, refusing to traverse: <p>";
// non-directory: 400 "path is not a directory: <p>".
func (s *Server) handleListDirectory(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	q := r.URL.Query()
	p := queryFirst(q, "path")
	if p == "" {
		writeError(w, http.StatusBadRequest, CodeMissingQuery, "missing query parameter 'path'")
		return
	}
	depth := 1
	if raw := queryFirst(q, "depth"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("invalid query parameter 'depth': %s", raw))
			return
		}
		depth = n
	}
	exp, err := s.expand(p, nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error converting path %s to absolute. %v", "", err))
		return
	}
	abs := sandboxAbs(exp)
	info, err := os.Lstat(s.HostPath(abs))
	if err != nil {
		s.handleFileError(w, fsErr(err, abs))
		return
	}
	if info.Mode()&os.ModeSymlink != 0 {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("path is a symbolic link, refusing to traverse: %s", abs))
		return
	}
	if !info.IsDir() {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("path is not a directory: %s", abs))
		return
	}
	entries := make([]FileInfo, 0, 16)
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		des, err := os.ReadDir(s.HostPath(dir))
		if err != nil {
			return fsErr(err, dir)
		}
		for _, de := range des {
			child := filepath.Join(dir, de.Name())
			fi, err := de.Info()
			if err != nil {
				return fsErr(err, child)
			}
			entry, err := s.buildFileInfo(child, fi, false)
			if err != nil {
				return err
			}
			entries = append(entries, entry)
			if de.IsDir() && level+1 < depth {
				if err := walk(child, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if depth > 0 {
		if err := walk(abs, 0); err != nil {
			writeError(w, http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error listing directory %s. %v", abs, err))
			return
		}
	}
	writeJSON(w, http.StatusOK, entries)
}

// handleMakeDirs serves POST /directories with a JSON object {<dir>:
// Permission} (§X1.3): mkdir -p (0777 &^ umask), then mode/owner as for
// uploads. Bad JSON: 400 INVALID_REQUEST_BODY; failures: handleFileError.
func (s *Server) handleMakeDirs(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	var req map[string]Permission
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("error parsing request, MAYBE invalid body format. %v", err))
		return
	}
	for dir, perm := range req {
		exp, err := s.expand(dir, nil)
		if err != nil {
			s.handleFileError(w, err)
			return
		}
		abs := sandboxAbs(exp)
		host := s.HostPath(abs)
		if err := os.MkdirAll(host, 0o777); err != nil {
			s.handleFileError(w, s.hostErr(err))
			return
		}
		if err := chmodFile(host, abs, perm); err != nil {
			s.handleFileError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// handleRemoveDirs serves DELETE /directories?path=... (§X1.5): os.RemoveAll
// on each path; a missing path is fine. Success: 200, empty.
func (s *Server) handleRemoveDirs(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	for _, dir := range r.URL.Query()["path"] {
		exp, err := s.expand(dir, nil)
		if err != nil {
			writeError(w, http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error resolving directory %s. %v", dir, err))
			return
		}
		if err := os.RemoveAll(s.HostPath(exp)); err != nil {
			writeError(w, http.StatusInternalServerError, CodeRuntimeError, fmt.Sprintf("error removing directory %s. %v", dir, s.hostErr(err)))
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// renameItem is one element of the POST /files/mv body.
type renameItem struct {
	Src  string `json:"src,omitempty"`
	Dest string `json:"dest,omitempty"`
}

// handleRenameFiles serves POST /files/mv with a JSON array of {src, dest}
// (§1.3; where the reference is silent, execd's RenameFile): each source is
// renamed in turn, creating dest's parent (0755); a missing source stops the
// request (HEAD: 404 FILE_NOT_FOUND, its error wraps the stat error;
// v1.0.18: 500 RUNTIME_ERROR, it does not), as does a dest that exists (500
// "destination path already exists"). Bad JSON: 400 INVALID_REQUEST_BODY.
// Success: 200, empty.
func (s *Server) handleRenameFiles(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	var req []renameItem
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("error parsing request, MAYBE invalid body format. %v", err))
		return
	}
	for _, it := range req {
		if err := s.renameFile(it); err != nil {
			s.handleFileError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) renameFile(it renameItem) error {
	src, err := s.expand(it.Src, nil)
	if err != nil {
		return fmt.Errorf("invalid source path: %w", err)
	}
	dst, err := s.expand(it.Dest, nil)
	if err != nil {
		return fmt.Errorf("invalid destination path: %w", err)
	}
	srcAbs, dstAbs := sandboxAbs(src), sandboxAbs(dst)
	if _, err := os.Stat(s.HostPath(srcAbs)); os.IsNotExist(err) {
		if s.v1018 {
			return fmt.Errorf("source path not found: %s", it.Src)
		}
		return fmt.Errorf("source path not found: %s: %w", it.Src, fsErr(err, srcAbs))
	}
	if err := os.MkdirAll(filepath.Dir(s.HostPath(dstAbs)), 0o755); err != nil {
		return fmt.Errorf("failed to create destination directory: %w", s.hostErr(err))
	}
	if _, err := os.Stat(s.HostPath(dstAbs)); err == nil {
		return fmt.Errorf("destination path already exists: %s", it.Dest)
	}
	if err := os.Rename(s.HostPath(srcAbs), s.HostPath(dstAbs)); err != nil {
		return fmt.Errorf("failed to rename file: %w", s.hostErr(err))
	}
	return nil
}
