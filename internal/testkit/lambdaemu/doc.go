// Package lambdaemu is a local stand-in for AWS Lambda running one function, for tests and the
// demo; it is never shipped. It starts the function's real bootstrap and serves it the Runtime
// API (2018-06-01), and serves callers the Invoke API (2015-03-31) in the shapes the SDK expects,
// so a test invokes the function as a workflow step or the console would: by name, through
// AWS_ENDPOINT_URL_LAMBDA. moto's Lambda runs no code without Docker, which this machine lacks.
package lambdaemu
