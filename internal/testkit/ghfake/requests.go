package ghfake

import (
	"net/http"
	"strings"
)

// The credential kinds requests are counted by (see Requests).
const (
	kindNone         = iota // no credential
	kindAdmin               // an admin (or any other non-App) token
	kindInstallation        // an installation token of the App (ghs_…)
	kindApp                 // the App's JWT
	kindRunner              // the stand-in runner's protocol and the test controls under /_fake/
	numKinds
)

var kindNames = [numKinds]string{"none", "admin", "installation", "app", "runner"}

// credential is the token or JWT of r's Authorization header ("Bearer x" or "token x"), or "".
func credential(r *http.Request) string {
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), "token "))
}

// kindOf classifies a request by its credential, by its look only: counting takes no lock.
func kindOf(r *http.Request) int {
	if strings.HasPrefix(r.URL.Path, "/_fake/") {
		return kindRunner
	}
	cred := credential(r)
	switch {
	case cred == "":
		return kindNone
	case strings.HasPrefix(cred, "ghs_"):
		return kindInstallation
	case strings.Count(cred, ".") == 2 && strings.HasPrefix(cred, "eyJ"):
		return kindApp
	}
	return kindAdmin
}

// RequestCount returns how many requests the server has answered, on any path: what a benchmark
// divides by its jobs for GitHub requests per job.
func (s *Server) RequestCount() int64 {
	var n int64
	for i := range s.requests {
		n += s.requests[i].Load()
	}
	return n
}

// Requests returns how many requests the server has answered that carried a credential of kind:
// admin (an admin or any other token), installation (the App's installation tokens), app (the
// App's JWT), runner (the stand-in runner's protocol and the test controls under /_fake/), or
// none. An unknown kind counts 0.
func (s *Server) Requests(kind string) int64 {
	for i, name := range kindNames {
		if name == kind {
			return s.requests[i].Load()
		}
	}
	return 0
}
