// Package pricing finds the hourly price of EC2 instances as they are launched, so that what a
// run holds can be costed later (instance-seconds × price): spot prices from the spot price
// history (EC2 DescribeSpotPriceHistory, the latest price of the type in the instance's zone),
// on-demand prices from the AWS Price List API (GetProducts: Linux, shared tenancy, no
// pre-installed software), cached per type and region for the life of the process. A price that
// cannot be had is no price: the caller records it as unknown, and Hangar never invents one.
package pricing
