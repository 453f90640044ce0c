//go:build localworld

package ghurl

// LocalWorld is true in the local world's builds (tests, the demo, the benchmarks: built with
// -tags localworld), whose GitHub is a plain-http stand-in on a loopback address. Release and
// deployed builds never carry the tag: for them a GitHub URL is https.
const LocalWorld = true
