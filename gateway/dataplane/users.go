package dataplane

import (
	"encoding/base64"
	"maps"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"
)

// The users operations run as, and the paths they name (docs/dataplane.md
// "Users and paths").

// User maps an SDK user name (Authorization: Basic on Connect calls,
// username= on /files) to the identity execd runs commands as.
type User struct {
	// UID and GID are the numeric identity passed to execd's /command.
	UID uint32
	GID uint32
	// Home resolves relative paths and is the default working directory;
	// empty means Config.HomeDir.
	Home string
}

// sdkUser is the user an operation runs as: a name and its identity, or
// nothing (execd's own identity).
type sdkUser struct {
	name string
	user User
	set  bool
}

// home returns the directory relative paths resolve against.
func (h *Handler) home(u sdkUser) string {
	if u.set && u.user.Home != "" {
		return u.user.Home
	}
	return h.cfg.HomeDir
}

// commandEnvs returns the environment variables a command of u gets on
// top of execd's own environment, as envd builds a process's: for a
// mapped user, HOME (its home, h.home), USER and LOGNAME (its name), then
// envs, the request's, which win over them. Without a user (execd's own
// identity) it is envs unchanged, and the command keeps execd's HOME.
// envs is not modified.
func (h *Handler) commandEnvs(u sdkUser, envs map[string]string) map[string]string {
	if !u.set {
		return envs
	}
	out := make(map[string]string, len(envs)+3)
	out["HOME"], out["USER"], out["LOGNAME"] = h.home(u), u.name, u.name
	maps.Copy(out, envs)
	return out
}

// lookupUser maps a user name to its identity; "" means the default user.
func (h *Handler) lookupUser(name string) (sdkUser, *Error) {
	if name == "" {
		name = h.cfg.DefaultUser
		if name == "" {
			return sdkUser{}, nil
		}
	}
	u, ok := h.cfg.Users[name]
	if !ok {
		return sdkUser{}, fail(CodeUserUnknown, "invalid username: '"+truncate(name, 64)+"'")
	}
	return sdkUser{name: name, user: u, set: true}, nil
}

// basicUser reads the user from Authorization: Basic base64("<user>:")
// (docs/wire-facts.md §E1.2). A missing header gives the default user.
func (h *Handler) basicUser(r *http.Request) (sdkUser, *Error) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return h.lookupUser("")
	}
	scheme, cred, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") || len(cred) > 1024 {
		return sdkUser{}, fail(CodeBadRequest, "the Authorization header must be Basic <base64 user:>")
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return sdkUser{}, fail(CodeBadRequest, "the Authorization header is not valid base64")
	}
	name, _, _ := strings.Cut(string(dec), ":")
	if name == "" {
		return h.lookupUser("")
	}
	return h.lookupUser(name)
}

// resolvePath makes p absolute against the user's home and cleans it. An
// empty path, one over 4,096 bytes, one with a NUL byte and one that is
// not valid UTF-8 are refused: execd takes paths in JSON (upload metadata,
// its answers), where invalid UTF-8 becomes U+FFFD, so such a path would
// name another file (and the SDKs cannot send one).
func (h *Handler) resolvePath(p string, u sdkUser) (string, *Error) {
	if p == "" {
		return "", fail(CodeBadRequest, "path is required")
	}
	if strings.ContainsRune(p, 0) || len(p) > 4096 {
		return "", fail(CodeBadRequest, "path is not valid")
	}
	if !utf8.ValidString(p) {
		return "", fail(CodeBadRequest, "path is not valid UTF-8")
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = h.home(u) + strings.TrimPrefix(p, "~")
	}
	if !path.IsAbs(p) {
		p = path.Join(h.home(u), p)
	}
	return path.Clean(p), nil
}
