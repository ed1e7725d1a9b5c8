#include "compiler/codegen/codegen.h"

#include <fmt/format.h>

#include "compiler/codegen/codelets.h"

namespace modelc {

namespace {

void set_codelet(rt::Instr& in, uint32_t codelet, std::vector<rt::SizeExpr> sizes, rt::SizeExpr extent, int64_t grain) {
  in.kind = rt::Instr::Kind::Codelet;
  in.codelet = codelet;
  in.sizes = std::move(sizes);
  in.extent = std::move(extent);
  in.grain = grain;
}

}  // namespace

void generate_code(Lowered& l, const CodegenOptions& options) {
  rt::Program& p = *l.program;
  CodeletCompiler kc(l.symbols, /*gpu=*/!options.ptx_target.empty());
  for (const CodeletSite& site : l.sites) {
    const LowerFunction& fn = l.functions.at(site.function);
    const FusionPlan& plan = *fn.plan;
    EmitOptions eo;
    eo.training = fn.training;
    EmittedCodelet k;
    if (site.horizontal) {
      std::vector<const FusionGroup*> groups;
      for (size_t gi : plan.horizontal.at(site.group)) groups.push_back(&plan.groups.at(gi));
      k = kc.emit_horizontal(*fn.graph, groups, plan.inlined, eo);
    } else {
      k = kc.emit_group(*fn.graph, plan.groups.at(site.group), plan.inlined, eo);
    }
    std::vector<rt::Instr>& instrs = p.functions.at(site.function).instrs;
    set_codelet(instrs.at(site.instr), k.codelet, std::move(k.sizes), std::move(k.extent), k.grain);
    if (k.partial.has_value() != site.partial.has_value())
      throw InternalError(fmt::format("codegen: group {} of '{}' is {}a two-phase reduction, but its memory plan says {}",
                                      site.group, fn.name, k.partial ? "" : "not ", k.partial ? "not" : "so"));
    if (!k.partial) continue;
    rt::Instr& part = instrs.at(*site.partial);
    const rt::BufferDesc& scratch = p.buffers.at(part.outputs.at(0));
    if (scratch.type != k.partial->scratch_type || scratch.shape.size() != 1 || !scratch.shape[0].is_constant() ||
        scratch.shape[0].eval({}) != k.partial->scratch_elements)
      throw InternalError(fmt::format("codegen: the scratch of group {} of '{}' differs from its memory plan's",
                                      site.group, fn.name));
    set_codelet(part, k.partial->codelet, std::move(k.partial->sizes), std::move(k.partial->extent), k.partial->grain);
  }
  if (!options.ptx_target.empty()) {
    p.ptx = kc.ptx(options.ptx_target);
    p.ptx_target = options.ptx_target;
  }
  if (options.llvm_text) *options.llvm_text = kc.module_text();
  if (options.shared_object) *options.shared_object = kc.shared_object();
  p.codelets = kc.finish(p.code);
  p.symbols = l.symbols.names();
  rt::record_kernel_contracts(p);
}

}  // namespace modelc
