// Package jobs is what a label-routed job is made of on its way through a stack
// (docs/labels.md): the rules that route a job's labels to a pool (Router), the messages of the
// jobs queue (the webhook function's and the dispatcher's, for the dispatcher) and the message an
// agent puts on the returns queue when it has finished a job (Return). It holds formats and rules
// only, no AWS or GitHub client, so that the agent can link it.
package jobs
