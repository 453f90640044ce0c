package ghfake

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// The GitHub App side of the stand-in: the App's key, its installations on accounts, and the
// installation tokens that authenticate the REST endpoints as an installation.

// firstInstallation is the id of the first installation; later ones count up from it.
const firstInstallation = 1001

// appKey is the App: its id and the public halves of its private keys (GitHub lets an App have
// several at once, so that a key can be rotated without a gap).
type appKey struct {
	id   int64
	keys []*rsa.PublicKey
}

// installation is the App installed on one account.
type installation struct {
	id    int64
	owner string
	repos []string // owner/name; nil when the installation covers every repository of the owner
	// withheld are permissions the installation has not been granted (WithholdPermission).
	withheld map[string]bool
	// granted are the App's permissions when it was installed: what the installation accepted.
	granted map[string]string
}

// WithholdPermission makes the App's installation on owner lack permission (administration,
// organization_self_hosted_runners, …): its tokens do not list it, and the runner endpoints that
// need it answer 403, as GitHub does for an installation that has not accepted it.
func (s *Server) WithholdPermission(owner, permission string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.installs[strings.ToLower(owner)]
	if in == nil {
		panic("ghfake: WithholdPermission: the App is not installed on " + owner)
	}
	if in.withheld == nil {
		in.withheld = map[string]bool{}
	}
	in.withheld[permission] = true
}

// permissions are what the installation's tokens say they may do.
func (in *installation) permissions() map[string]string {
	out := map[string]string{}
	for k, v := range in.granted {
		if !in.withheld[k] {
			out[k] = v
		}
	}
	return out
}

// covers reports whether the installation may act in scope: the owner's organisation, or one of
// the repositories it is installed on.
func (in *installation) covers(scope Scope) bool {
	if !strings.EqualFold(in.owner, scope.Org()) {
		return false
	}
	return !scope.IsRepo() || in.repos == nil ||
		slices.ContainsFunc(in.repos, func(r string) bool { return strings.EqualFold(r, string(scope)) })
}

// instToken is one issued installation token.
type instToken struct {
	installation int64
	expires      time.Time
}

// installationPermissions are what the stand-in's installation tokens say they may do: what
// Hangar's App asks for.
var installationPermissions = map[string]string{
	"actions": "read", "administration": "write", "metadata": "read", "organization_self_hosted_runners": "write",
}

// EnableApp makes the stand-in play GitHub App appID: it generates the App's RSA 2048 key pair,
// keeps the public key, and returns the private key in PEM (RSA PRIVATE KEY, PKCS#1), as the App
// settings' "Generate a private key" does. Calling it again replaces the App and rotates its key:
// JWTs signed with the old key are refused from then on, as after deleting it on GitHub.
func (s *Server) EnableApp(appID int64) []byte {
	key := newAppKey()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.app = &appKey{id: appID, keys: []*rsa.PublicKey{&key.PublicKey}}
	s.appInfo = nil
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// AddAppKey generates another private key of the App, valid alongside the others until
// RemoveAppKey, as the App settings' "Generate a private key" does for an App that has one.
func (s *Server) AddAppKey() []byte {
	key := newAppKey()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.app == nil {
		panic("ghfake: AddAppKey before EnableApp")
	}
	s.app.keys = append(s.app.keys, &key.PublicKey)
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// RemoveAppKey deletes the App's key whose private half is privatePEM: JWTs it signs are refused
// from then on.
func (s *Server) RemoveAppKey(privatePEM []byte) {
	block, _ := pem.Decode(privatePEM)
	if block == nil {
		panic("ghfake: RemoveAppKey: not PEM")
	}
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		panic("ghfake: RemoveAppKey: " + err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.app.keys = slices.DeleteFunc(s.app.keys, func(k *rsa.PublicKey) bool { return k.Equal(&key.PublicKey) })
}

func newAppKey() *rsa.PrivateKey {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(fmt.Sprintf("ghfake: generate the App's key: %v", err)) // crypto/rand does not fail
	}
	return key
}

// Install installs the App on account owner (an organisation or a user, by login): on every
// repository of the owner when repos is empty, else on those only (owner/name). It returns the
// installation id. Installing again on the same owner keeps the id and replaces the repository
// list.
func (s *Server) Install(owner string, repos ...string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.installs[strings.ToLower(owner)]
	if in == nil {
		s.installSeq++
		in = &installation{id: s.installSeq, owner: owner}
		s.installs[strings.ToLower(owner)] = in
	}
	in.granted = maps.Clone(s.meta().permissions)
	in.repos = nil
	if len(repos) > 0 {
		in.repos = slices.Clone(repos)
	}
	return in.id
}

// SetOrg makes owner an organisation: its repositories' webhook payloads then say so (owner type
// Organization, and an organization object). SetGroup and any /orgs/ request do the same.
func (s *Server) SetOrg(login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.orgs[strings.ToLower(login)] = true
}

// isOrg reports whether owner is known to be an organisation. The caller holds s.mu.
func (s *Server) isOrg(owner string) bool {
	if s.orgs[strings.ToLower(owner)] {
		return true
	}
	for _, repos := range s.groups {
		if slices.ContainsFunc(repos, func(r string) bool { return strings.EqualFold(Scope(r).Org(), owner) }) {
			return true
		}
	}
	return false
}

// SetInstallationTokenTTL sets how long installation tokens issued from now on last (GitHub's,
// and the default: an hour).
func (s *Server) SetInstallationTokenTTL(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instTTL = d
}

// ExpireInstallationTokens makes every installation token issued so far expire now, as a revoked
// token, or one GitHub expired early, does: the next request with it gets 401 Bad credentials,
// and the client must ask for a new one.
func (s *Server) ExpireInstallationTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for tok, t := range s.instTokens {
		t.expires = now
		s.instTokens[tok] = t
	}
}

// installationByID returns installation id, or nil. The caller holds s.mu.
func (s *Server) installationByID(id int64) *installation {
	for _, in := range s.installs {
		if in.id == id {
			return in
		}
	}
	return nil
}

// installationFor returns the installation covering repository repo (owner/name), or nil. The
// caller holds s.mu.
func (s *Server) installationFor(repo Scope) *installation {
	if in := s.installs[strings.ToLower(repo.Org())]; in != nil && in.covers(repo) {
		return in
	}
	return nil
}

// createInstallationToken serves POST /app/installations/{installation_id}/access_tokens: the
// App, authenticated by a JWT signed with its key, gets a token for one of its installations.
func (s *Server) createInstallationToken(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		writeError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	if err := s.verifyJWT(strings.TrimSpace(raw)); err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	id, _ := strconv.ParseInt(r.PathValue("installation_id"), 10, 64)
	in := s.installationByID(id)
	if in == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	tok := "ghs_" + randomToken("")
	exp := s.now().Add(s.instTTL).UTC().Truncate(time.Second)
	s.instTokens[tok] = instToken{installation: in.id, expires: exp}
	s.minted["installation"]++
	selection := "all"
	if in.repos != nil {
		selection = "selected"
	}
	writeJSON(w, http.StatusCreated, map[string]any{"token": tok, "expires_at": exp.Format(time.RFC3339),
		"permissions": in.permissions(), "repository_selection": selection})
}

// jwtSkew is the clock drift GitHub tolerates in an App's JWT.
const jwtSkew = 60 * time.Second

// errJWT is GitHub's answer to a JWT it cannot decode or verify (its message, capitalized, is
// GitHub's).
var errJWT = errors.New("A JSON web token could not be decoded") //nolint:staticcheck // GitHub's own message, verbatim

// verifyJWT checks an App JWT as GitHub does: RS256, signed with the key of the App its iss claim
// names (a number, or a decimal string as ghinstallation sends), iat and exp present, exp in the
// future and at most ten minutes after iat, by the server's clock give or take a minute. The
// caller holds s.mu.
func (s *Server) verifyJWT(raw string) error {
	claims := jwt.MapClaims{}
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithJSONNumber(), jwt.WithoutClaimsValidation())
	err := errJWT
	for i := 0; s.app != nil && i < len(s.app.keys) && err != nil; i++ {
		_, err = parser.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) {
			iss, err := numericClaim(claims["iss"])
			if err != nil {
				return nil, err
			}
			if s.app.id != iss {
				return nil, fmt.Errorf("no App %d", iss)
			}
			return s.app.keys[i], nil
		})
	}
	if err != nil {
		return errJWT
	}
	iat, errIat := numericClaim(claims["iat"])
	exp, errExp := numericClaim(claims["exp"])
	now := s.now()
	switch {
	case errIat != nil || time.Unix(iat, 0).After(now.Add(jwtSkew)):
		return errors.New("'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued")
	case errExp != nil || !time.Unix(exp, 0).After(now.Add(-jwtSkew)):
		return errors.New("'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires")
	case exp-iat > int64((10 * time.Minute).Seconds()):
		return errors.New("'Expiration time' claim ('exp') is too far in the future")
	}
	return nil
}

// numericClaim reads a JWT claim that is a number, or a string of decimal digits.
func numericClaim(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		f, err := x.Float64()
		return int64(f), err
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("claim %v: want a number", v)
}
