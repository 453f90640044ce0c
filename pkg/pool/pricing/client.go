package pricing

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/pricing"
)

// listRegion is where the Price List API answers (it also does in eu-central-1 and ap-south-1);
// it serves the prices of every region.
const listRegion = "us-east-1"

// NewFromConfig returns a pricer for instances launched in cfg's region: the spot history from
// that region's EC2, the Price List from its endpoint in us-east-1 (AWS_ENDPOINT_URL_PRICING
// still applies).
func NewFromConfig(cfg aws.Config) *Pricer {
	return &Pricer{
		EC2:    ec2.NewFromConfig(cfg),
		List:   pricing.NewFromConfig(cfg, func(o *pricing.Options) { o.Region = listRegion }),
		Region: cfg.Region,
	}
}
