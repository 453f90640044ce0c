// Package stack turns a Hangar config into a CloudFormation stack: the state table, the runner
// token key, per pool a queue with its dead-letter queue, a launch template and the pool document,
// the refresh function with its schedule and EC2 event rules, the roles (instance, workflows
// through GitHub OIDC, refresh), the agent as an S3 asset, and alarms and a dashboard; and, when
// some pool serves label-routed jobs, the GitHub App's secrets, the jobs and returns queues, the
// webhook function behind its URL and the dispatcher, each with a role of its own (jobs.go,
// jobroles.go).
//
// Every policy names its actions; resources are the stack's own, or constrained by the
// hangar:stack tag and the stack's launch templates where EC2 cannot name them in advance.
package stack
