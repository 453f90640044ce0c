// Package emustack deploys a synthesized CDK stack into the emulators, as `cdk deploy` does into
// an account: it stands in for `cdk bootstrap` (the assets bucket and the bootstrap version
// parameter the template checks), uploads the stack's file assets, adapts the template to what
// the emulator's CloudFormation lacks (each gap reported, never silently), and creates or
// updates the stack, waiting until it settles.
package emustack
