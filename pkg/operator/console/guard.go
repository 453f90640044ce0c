package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
)

// NewToken returns a fresh random token: 32 bytes, URL-safe base64.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// contentSecurity allows the page's own stylesheet and nothing else: no script at all, no frame,
// no other origin, forms only to itself.
const contentSecurity = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// secure sets the headers every response carries.
func secure(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurity)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// NewHostName returns a fresh host name for a console: a random label under .localhost, which
// browsers resolve to the loopback address (RFC 6761). Browsers scope cookies by host name, not by
// port, so a cookie of 127.0.0.1 would reach every other listener on it; one of this name reaches
// only a listener that knows the name, which is printed to the operator alone.
func NewHostName() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "hangar-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)) + ".localhost"
}

// cookieName is the token's cookie, host-only: its host name (NewHostName) is the console's own.
const cookieName = "hangar_ui"

// admit lets through only GETs to the bound host from a browser holding the token; the first
// request, which carries the token in its address, gets it as a cookie and is sent on to the
// same page without it (so the token leaves the address bar and the history).
func (c *Console) admit(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		c.problem(w, r, http.StatusMethodNotAllowed, "method "+r.Method+": hangar ui only reads; it answers GET")
		return false
	}
	if r.Host != c.cfg.Host {
		c.problem(w, r, http.StatusMisdirectedRequest, "host "+r.Host+": hangar ui answers only at "+c.cfg.Host)
		return false
	}
	if t := r.URL.Query().Get("token"); t != "" {
		if !c.tokenIs(t) {
			c.problem(w, r, http.StatusUnauthorized, "the token in the address is not this hangar ui's: open the address it printed when it started")
			return false
		}
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: c.cfg.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		q := r.URL.Query()
		q.Del("token")
		to := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
		if !strings.HasPrefix(to.Path, "/") || strings.HasPrefix(to.Path, "//") {
			to.Path = "/" // never another host's address (//host/…)
		}
		http.Redirect(w, r, to.RequestURI(), http.StatusSeeOther)
		return false
	}
	if ck, err := r.Cookie(cookieName); err == nil && c.tokenIs(ck.Value) {
		return true
	}
	c.problem(w, r, http.StatusUnauthorized, "no token: open the address hangar ui printed when it started (it ends in ?token=…)")
	return false
}

func (c *Console) tokenIs(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(c.cfg.Token)) == 1
}
