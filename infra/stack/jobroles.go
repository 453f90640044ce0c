package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// webhookItems matches the partition keys of the webhook events the stack records
// (webhook/<job id>/<action>, state.EventPrefix): no instance's ARN is among them.
const webhookItems = state.EventPrefix + "*"

// newJobRoles makes the two label-routed jobs' functions' roles, one each, so that each holds only
// its own secret: the webhook function's (ingress) the webhook secret, the dispatcher's the App's
// private key, the stack's most powerful credential (docs/labels.md, "The App's key").
func (r *roles) newJobRoles(h *hangar) {
	lambda := func(id, what string) awsiam.Role {
		return awsiam.NewRole(h.stack, jsii.String(id), &awsiam.RoleProps{
			AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
			Description: jsii.String("Hangar " + h.cfg.Stack + " " + what),
		})
	}
	r.ingress = lambda("WebhookRole", "webhook function: checks GitHub's deliveries and puts the stack's jobs on the jobs queue")
	r.dispatch = lambda("DispatchRole", "dispatcher: places label-routed jobs on instances with just-in-time runners")
}

// grantJobs writes what label-routed jobs add to the policies: the two functions' own
// statements (the dispatcher also holds the control plane's, grant) and the instance role's one
// addition. Their log groups are granted where they are made (jobFunction); their queues'
// resource policies only refuse plain-HTTP requests.
func (r *roles) grantJobs(h *hangar) {
	j := h.jobs
	tableArn := h.table.t.TableArn()
	poolDocs, poolPath := poolDocuments(h)

	// The instance: an agent that has ended a job tells the dispatcher (a return); it may send to
	// the returns queue, and read nothing from it nor from any other queue of the jobs.
	r.instance.AddToPolicy(statement([]string{"sqs:SendMessage"}, []*string{j.returns.QueueArn()}, nil))

	// The webhook function. Its URL takes requests from anyone; what it may do with them is only
	// this: read the webhook secret (to check each delivery's signature); read the pool
	// documents (to route the job); record each accepted event once, and forget it when the
	// enqueue fails, on items keyed webhook/... only (never an instance's item); and put the job
	// on the jobs queue. It makes no claim and reaches neither GitHub nor EC2.
	for _, s := range []awsiam.PolicyStatement{
		statement([]string{"secretsmanager:GetSecretValue"}, []*string{j.webhookSecret}, nil),
		statement([]string{"ssm:GetParametersByPath"}, []*string{poolPath, poolDocs}, nil),
		statement([]string{"dynamodb:UpdateItem", "dynamodb:DeleteItem"}, []*string{tableArn}, map[string]interface{}{
			"ForAllValues:StringLike": map[string]interface{}{"dynamodb:LeadingKeys": []string{webhookItems}},
		}),
		statement([]string{"sqs:SendMessage"}, []*string{j.queue.QueueArn()}, nil),
	} {
		r.ingress.AddToPolicy(s)
	}

	// The dispatcher: besides the control plane (claims, launches, doorbells, starting and
	// terminating the stack's instances), the App's private key, to
	// make just-in-time runners; its own delayed checks on the jobs queue (SendMessageBatch is
	// authorized as sqs:SendMessage); and what Lambda's event source mappings need of the two
	// queues that feed it, as its role (receive, delete, read the attributes).
	for _, s := range []awsiam.PolicyStatement{
		statement([]string{"secretsmanager:GetSecretValue"}, []*string{j.appSecret}, nil),
		statement([]string{"sqs:SendMessage"}, []*string{j.queue.QueueArn()}, nil),
		statement([]string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"},
			[]*string{j.queue.QueueArn(), j.returns.QueueArn()}, nil),
		// The label door's own items: the jobs waiting for room, each taken off with one
		// conditional delete, and the record of a job placed again, forgotten when the placing
		// fails (so that the event's next delivery tries again).
		statement([]string{"dynamodb:DeleteItem"}, []*string{tableArn}, map[string]interface{}{
			"ForAllValues:StringLike": map[string]interface{}{"dynamodb:LeadingKeys": []string{webhookItems}},
		}),
	} {
		r.dispatch.AddToPolicy(s)
	}
}
