// Validates a CloudFormation template offline with @aws/cloudformation-validate (cfn-lint's rules
// and the resource schemas). Exits 1 on any error; prints errors and warnings.
import { RegoEngine, TemplateFile } from "@aws/cloudformation-validate";

const engine = new RegoEngine();
try {
  const report = engine.validateStandard(new TemplateFile(process.argv[2]));
  const c = report.metadata.counts;
  for (const d of report.diagnostics) {
    if (!/INFO|DEBUG/.test(d.severity)) {
      console.log(`[${d.severity}] ${d.ruleId} ${d.entity?.logicalId ?? ""} ${d.propertyPath ?? ""}: ${d.message}`);
    }
  }
  console.log(`${process.argv[2]}: ${c.fatal} fatal, ${c.errors} errors, ${c.warnings} warnings (${report.metadata.rulesEvaluated} rules, ${report.metadata.resourcesScanned} resources)`);
  process.exit(c.fatal + c.errors > 0 ? 1 : 0);
} finally {
  engine.free();
}
