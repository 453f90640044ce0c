//go:build !localworld

package ghurl

// LocalWorld is false in every build but the local world's (see localworld.go): a GitHub URL is
// https, never plain http, not even to a loopback address.
const LocalWorld = false
