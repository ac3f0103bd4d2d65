package execdstub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// envRef matches $NAME and ${NAME} as execd's path expansion does.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// expand imitates execd's path expansion (the execd source, pkg/util/pathutil;
// docs/wire-facts.md is silent): $NAME / ${NAME} are replaced from the stub
// process environment overlaid with overrides, a reference to an undefined
// variable is an error, and a leading "~" becomes Config.Home. The result is
// the string execd would hand to the OS (possibly relative).
func (s *Server) expand(p string, overrides map[string]string) (string, error) {
	if p == "" {
		return "", nil
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, v := range overrides {
		env[k] = v
	}
	missing := map[string]bool{}
	for _, m := range envRef.FindAllStringSubmatch(p, -1) {
		name := m[1]
		if name == "" {
			name = m[2]
		}
		if _, ok := env[name]; !ok {
			missing[name] = true
		}
	}
	if len(missing) > 0 {
		names := make([]string, 0, len(missing))
		for n := range missing {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("path references undefined environment variables: %s", strings.Join(names, ","))
	}
	out := os.Expand(p, func(k string) string { return env[k] })
	switch {
	case out == "~":
		return s.cfg.Home, nil
	case strings.HasPrefix(out, "~/"):
		return path.Join(s.cfg.Home, out[2:]), nil
	}
	return out, nil
}

// sandboxAbs makes p absolute relative to sandbox "/" (execd's working
// directory) and cleans it, like filepath.Abs inside the sandbox.
func sandboxAbs(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return filepath.Clean(p)
}

// sandboxPath maps a host path under Root back to its sandbox path.
func (s *Server) sandboxPath(host string) string {
	rel, err := filepath.Rel(s.root, host)
	if err != nil || rel == "." {
		return "/"
	}
	return "/" + filepath.ToSlash(rel)
}

// fsErr rewrites the host path inside an *fs.PathError or *os.LinkError to
// shown, the path execd itself would have passed to the system call, so
// error messages read as they do in the sandbox.
func fsErr(err error, shown string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: shown, Err: pe.Err}
	}
	return err
}

// isNotExist is execd's not-found test: HEAD unwraps (errors.Is), v1.0.18
// used os.IsNotExist, which does not look through fmt.Errorf wrapping.
func (s *Server) isNotExist(err error) bool {
	if s.v1018 {
		return os.IsNotExist(err)
	}
	return errors.Is(err, fs.ErrNotExist)
}

// globMatch reports whether base name name matches pattern the way execd's
// /files/search does (a doublestar-derived matcher applied to the base
// name; execd source pkg/util/glob). Supported: '*', '?', '[...]' classes
// ('!' or '^' negates), '\' escapes and '{a,b}' alternatives; because the
// name has no separator, '**' behaves like '*'. execd's extglob '!(...)' is
// not supported. A malformed pattern yields path.ErrBadPattern, whose text
// ("syntax error in pattern") matches execd's.
func globMatch(pattern, name string) (bool, error) {
	alts, err := braceExpand(pattern)
	if err != nil {
		return false, err
	}
	for _, alt := range alts {
		for strings.Contains(alt, "**") {
			alt = strings.ReplaceAll(alt, "**", "*")
		}
		alt = strings.ReplaceAll(alt, "[!", "[^")
		ok, err := path.Match(alt, name)
		if err != nil {
			return false, err
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

// braceExpand expands the first top-level {a,b,...} group of p
// recursively.
func braceExpand(p string) ([]string, error) {
	open := -1
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' {
			i++
			continue
		}
		if p[i] == '{' {
			open = i
			break
		}
		if p[i] == '}' {
			return nil, path.ErrBadPattern
		}
	}
	if open < 0 {
		return []string{p}, nil
	}
	depth, start := 0, open+1
	var parts []string
	for i := open; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			depth++
		case ',':
			if depth == 1 {
				parts = append(parts, p[start:i])
				start = i + 1
			}
		case '}':
			depth--
			if depth == 0 {
				parts = append(parts, p[start:i])
				var out []string
				for _, part := range parts {
					sub, err := braceExpand(p[:open] + part + p[i+1:])
					if err != nil {
						return nil, err
					}
					out = append(out, sub...)
				}
				return out, nil
			}
		}
	}
	return nil, path.ErrBadPattern
}
