package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// Deployed is what the stack settles for a pool: where its resources are (CloudFormation
// references), and the GitHub server it serves (the config's github.serverUrl).
type Deployed struct {
	// GitHubURL is the GitHub server the document pins (empty: https://github.com).
	GitHubURL                  string
	Partition, Region, Account string
	Table                      string
	QueueURL, DeadLetterURL    string
	TemplateID, TemplateVer    string
	SpecHash                   string
	// Subnets are the subnets a VPC lookup found, for a pool with vpc instead of subnets.
	Subnets []pooldoc.Subnet
	// StackLabel (the config's app.label) and ReturnsQueueURL (the stack's returns queue) go
	// into the documents of pools that serve label-routed jobs, and no others.
	StackLabel, ReturnsQueueURL string
	// JobsQueueURL and JobsDeadLetterURL are the stack's jobs queue and its dead letters, in
	// the same documents (what hangar status counts).
	JobsQueueURL, JobsDeadLetterURL string
	// HistoryDays is the config's history.days, in every document.
	HistoryDays int
	// Repositories (the config's github.repositories) are the allowedRepositories of a pool
	// that names none; Installations (github.installations) go into every jobs section.
	Repositories  []string
	Installations []int64
	// StackCap is the config's maxInstances with its pools' names, in every document (nil: none).
	StackCap *pooldoc.StackCap
}

// Placeholders are well-formed deployed values, for validating a pool before anything exists.
var Placeholders = Deployed{
	Partition: "aws", Region: "us-east-1", Account: "123456789012", Table: "hangar-instances",
	QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/hangar-pool", TemplateID: "lt-0123456789abcdef0",
	TemplateVer: "1", SpecHash: "placeholder",
	Subnets:           []pooldoc.Subnet{{ID: "subnet-0123456789abcdef0", AZ: "us-east-1a"}},
	StackLabel:        "hangar",
	ReturnsQueueURL:   "https://sqs.us-east-1.amazonaws.com/123456789012/hangar-returns",
	JobsQueueURL:      "https://sqs.us-east-1.amazonaws.com/123456789012/hangar-jobs",
	JobsDeadLetterURL: "https://sqs.us-east-1.amazonaws.com/123456789012/hangar-jobs-dlq",
	Repositories:      []string{"placeholder/placeholder"},
}

// Doc is a pool document as the stack publishes it.
type Doc pooldoc.Document

// JSON is the document as published.
func (d Doc) JSON() ([]byte, error) { return json.Marshal(pooldoc.Document(d)) }

// Parsed reads the document back as provision, refresh and the agent do (defaults applied,
// unknown fields refused, every field validated).
func (d Doc) Parsed() (*pooldoc.Document, error) {
	b, err := d.JSON()
	if err != nil {
		return nil, err
	}
	return pooldoc.Parse(b)
}

// Document is the pool document the stack publishes for p (docs/design.md §9).
func (p *Pool) Document(d Deployed) Doc {
	subnets := p.Subnets
	if p.VPC != nil {
		subnets = d.Subnets
	}
	var jobs *pooldoc.Jobs
	returns := ""
	if j := p.Jobs; j != nil {
		jobs = &pooldoc.Jobs{StackLabel: d.StackLabel, Labels: j.Labels, Scope: j.Scope,
			Installations: d.Installations, QueueURL: d.JobsQueueURL, DeadLetterQueueURL: d.JobsDeadLetterURL}
		returns = d.ReturnsQueueURL
	}
	allowed := p.AllowedRepositories
	if len(allowed) == 0 {
		allowed = d.Repositories
	}
	return Doc{
		SchemaVersion: pooldoc.SchemaVersion, Name: p.Name,
		Partition: d.Partition, Region: d.Region, Account: d.Account, Table: d.Table,
		QueueURL: d.QueueURL, DeadLetterQueueURL: d.DeadLetterURL, GitHubURL: d.GitHubURL,
		LaunchTemplate: pooldoc.LaunchTemplate{ID: d.TemplateID, Version: d.TemplateVer},
		SpecHash:       d.SpecHash, InstanceTypes: p.InstanceTypes, InstanceRequirements: p.InstanceRequirements, Subnets: subnets, Market: p.Market,
		AllocationStrategy: p.AllocationStrategy, Labels: p.Labels, AllowedRepositories: allowed,
		Reuse: p.Reuse, RunnerGroup: p.RunnerGroup, Tags: p.Tags, Timeouts: p.Timeouts, Warm: p.Warm, Runner: p.Runner,
		Jobs: jobs, ReturnsQueueURL: returns, HistoryDays: d.HistoryDays,
		MaxInstances: p.MaxInstances, StackCap: d.StackCap,
	}
}

// SpecHash is the hash of what makes the pool's instances what they are: image, types (or requirements), disk,
// metadata options, security groups, runner and pre-runner script, and the agent build (its
// SHA-256). A change to any of them makes refresh replace the pool's idle instances.
func (p *Pool) SpecHash(agentSHA256 string) string {
	b, _ := json.Marshal(struct {
		Image          Image
		Types          []string
		Disk           Disk
		HopLimit       int
		SecurityGroups []string
		Runner         pooldoc.Runner
		Agent          string
		Requirements   *pooldoc.Requirements `json:",omitempty"` // left out when absent: older hashes stand
	}{p.Image, p.InstanceTypes, p.Disk, p.MetadataHopLimit, p.SecurityGroups, p.Runner, agentSHA256, p.InstanceRequirements})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}
