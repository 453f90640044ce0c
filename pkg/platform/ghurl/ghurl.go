// Package ghurl is the policy for GitHub URLs that Hangar is given (a pool's server, the API
// URL, a runner's registration URL): https, and plain http to a loopback address only in the
// local world's builds. It links no GitHub client, so that what only checks a URL (pool
// documents, the refresh Lambda) does not link one.
package ghurl

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// CheckURL checks a GitHub server or API URL: https; plain http to a loopback address only in
// the local world's builds (LocalWorld), where GitHub is a stand-in.
func CheckURL(raw string) error { return checkURL(raw, LocalWorld) }

// checkURL is CheckURL's policy for either kind of build.
func checkURL(raw string, localWorld bool) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "":
		return fmt.Errorf("%q: want an https URL such as https://github.com", raw)
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && localWorld && isLoopback(u.Hostname()):
		return nil
	}
	return fmt.Errorf("%q: want an https URL such as https://github.com", raw)
}

// CheckServer checks the GitHub server a pool pins (https://github.com or an enterprise
// server's https://<host>): a URL CheckURL accepts, with a host and nothing else, neither user
// information, path, query nor fragment.
func CheckServer(raw string) error { return checkServer(raw, LocalWorld) }

func checkServer(raw string, localWorld bool) error {
	if err := checkURL(raw, localWorld); err != nil {
		return err
	}
	u, _ := url.Parse(raw) // checkURL parsed it
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return fmt.Errorf("%q: want the server alone, such as https://github.com or https://ghe.example.com: no user, path, query or fragment", raw)
	}
	return nil
}

// SameServer reports whether URL raw is on the GitHub server server: the same scheme and host
// (the host compared without case, a default port the same as none).
func SameServer(raw, server string) bool {
	a, errA := url.Parse(raw)
	b, errB := url.Parse(server)
	if errA != nil || errB != nil || a.Host == "" {
		return false
	}
	return strings.EqualFold(a.Scheme, b.Scheme) && hostPort(a) == hostPort(b)
}

// hostPort is u's host in lower case with its port, the scheme's default port left out.
func hostPort(u *url.URL) string {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (port == "443" && strings.EqualFold(u.Scheme, "https")) || (port == "80" && strings.EqualFold(u.Scheme, "http")) {
		port = ""
	}
	if port == "" {
		return host
	}
	return net.JoinHostPort(host, port)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// githubCom is github.com's server, whose REST API is on a host of its own.
const githubCom = "https://github.com"

// APIURL is the REST API of GitHub server server: https://api.github.com for github.com (or
// an empty server), <server>/api/v3 for an enterprise server.
func APIURL(server string) string {
	server = strings.TrimRight(server, "/")
	if server == "" || server == githubCom {
		return "https://api.github.com"
	}
	return server + "/api/v3"
}
