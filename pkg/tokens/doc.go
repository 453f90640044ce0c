// Package tokens seals GitHub runner tokens for one instance, with KMS.
//
// A registration token (the only runner token Hangar hands an instance) can register any number
// of runners for an hour; the table holding it is readable by every repository allowed to run
// the provision and release steps. So a token is written to an instance's item only as KMS
// ciphertext under an encryption context naming that instance ({"instanceArn": <its ARN>}): the
// instance role may decrypt only with its own ARN in the context, the control-plane roles may
// only encrypt (docs/security.md). Anyone who reads the item holds ciphertext no other role and
// no other instance can open.
package tokens
