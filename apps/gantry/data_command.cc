// `gantry data`: pack, inspect and verify datasets (MosaicML Streaming MDS, WebDataset tar
// shards) at any store URL. The work is in gantry/data/dataset.h; this file parses flags and
// prints.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gantry/common/progress.h"
#include "gantry/common/units.h"
#include "gantry/data/dataset.h"

namespace gantry::cli {
namespace {

struct DataArgs {
  StoreOptions store;
  bool json = false;
  bool shards = false;
  std::string url;
  std::string input;
  std::string format = "wds";
  std::vector<std::string> columns;  // NAME=ENCODING
  std::string compression;
  std::vector<std::string> hashes;
  uint64_t shard_size = uint64_t{1} << 26;
  uint64_t shard_samples = 0;
  bool gzip = false;
  bool overwrite = false;
};

int Fail(const std::string& what, const Status& s) { return ReportFailure("data " + what, s); }

std::unique_ptr<ProgressBar> Bar(const std::string& label, const DataArgs& a) {
  return std::make_unique<ProgressBar>(label, ProgressBar::StderrIsTerminal() && !a.json);
}

nlohmann::ordered_json SummaryJson(const data::DatasetSummary& s, bool shards) {
  nlohmann::ordered_json cols = nlohmann::ordered_json::array();
  for (const auto& c : s.columns) {
    nlohmann::ordered_json j = {{"name", c.name}};
    if (s.format == data::DatasetFormat::kMds) {
      j["encoding"] = c.encoding;
      j["size"] = c.size ? nlohmann::ordered_json(*c.size) : nlohmann::ordered_json(nullptr);
    } else {
      j["bytes"] = c.bytes;
    }
    j["samples"] = c.samples;
    cols.push_back(std::move(j));
  }
  nlohmann::ordered_json out = {{"url", s.url},
                                {"format", data::DatasetFormatName(s.format)},
                                {"samples", s.samples},
                                {"shards", s.shards.size()},
                                {"stored_bytes", s.stored_bytes},
                                {"raw_bytes", s.raw_bytes},
                                {"columns", cols},
                                {"hashes", s.hashes}};
  if (s.format == data::DatasetFormat::kWebDataset) out["folders"] = s.folders;
  if (shards) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& sh : s.shards) {
      list.push_back({{"name", sh.name},
                      {"samples", sh.samples},
                      {"stored_bytes", sh.stored_bytes},
                      {"raw_bytes", sh.raw_bytes},
                      {"compression", sh.compression}});
    }
    out["shard_list"] = std::move(list);
  }
  return out;
}

int Inspect(DataArgs& a) {
  auto d = data::LocateDataset(a.url, a.store);
  if (!d.ok()) return Fail("inspect", d.status());
  std::unique_ptr<ProgressBar> bar = Bar("inspect", a);
  auto s = data::InspectDataset(*d, {}, bar->Callback());
  bar.reset();
  if (!s.ok()) return Fail("inspect", s.status());
  if (a.json) {
    std::cout << SummaryJson(*s, a.shards).dump(2) << "\n";
    return kExitOk;
  }
  std::printf("dataset:  %s\nformat:   %s\nsamples:  %llu\nshards:   %zu\nsize:     %s stored",
              s->url.c_str(), data::DatasetFormatName(s->format),
              static_cast<unsigned long long>(s->samples), s->shards.size(),
              FormatBytes(s->stored_bytes).c_str());
  if (s->raw_bytes != s->stored_bytes) {
    std::printf(", %s uncompressed", FormatBytes(s->raw_bytes).c_str());
  }
  // Shards from below the dataset's own folder are read too: shown, as a copy of the shards
  // in a subfolder would be read as more samples.
  if (!s->folders.empty() && !(s->folders.size() == 1 && s->folders[0].empty())) {
    std::string list;
    for (size_t i = 0; i < s->folders.size() && i < 8; ++i) {
      list += (i ? ", " : "") + (s->folders[i].empty() ? std::string("./") : s->folders[i]);
    }
    if (s->folders.size() > 8) list += ", ...";
    std::printf("\nfolders:  %zu (%s): shards below the URL are read too", s->folders.size(),
                list.c_str());
  }
  std::string hashes;
  for (const std::string& h : s->hashes) hashes += (hashes.empty() ? "" : ", ") + h;
  std::printf("\nhashes:   %s\n", hashes.empty() ? "none" : hashes.c_str());
  std::printf("columns:\n");
  for (const auto& c : s->columns) {
    if (s->format == data::DatasetFormat::kMds) {
      std::printf("  %-20s %-22s %s\n", c.name.c_str(), c.encoding.c_str(),
                  c.size ? (std::to_string(*c.size) + " bytes").c_str() : "variable");
    } else {
      std::printf("  %-20s %8llu samples  %s\n", c.name.c_str(),
                  static_cast<unsigned long long>(c.samples), FormatBytes(c.bytes).c_str());
    }
  }
  if (a.shards) {
    std::printf("shards:\n");
    for (const auto& sh : s->shards) {
      std::printf("  %-32s %8llu samples  %12s%s%s\n", sh.name.c_str(),
                  static_cast<unsigned long long>(sh.samples), FormatBytes(sh.stored_bytes).c_str(),
                  sh.compression.empty() ? "" : "  ", sh.compression.c_str());
    }
  }
  return kExitOk;
}

int Verify(DataArgs& a) {
  auto d = data::LocateDataset(a.url, a.store);
  if (!d.ok()) return Fail("verify", d.status());
  std::unique_ptr<ProgressBar> bar = Bar("verify", a);
  auto r = data::VerifyDataset(*d, {}, bar->Callback());
  bar.reset();
  if (!r.ok()) return Fail("verify", r.status());
  if (a.json) {
    nlohmann::ordered_json problems = nlohmann::ordered_json::array();
    for (const Status& p : r->problems) {
      problems.push_back({{"code", StatusCodeName(p.code())}, {"message", p.message()}});
    }
    std::cout << nlohmann::ordered_json{{"url", a.url},
                                        {"format", data::DatasetFormatName(d->format)},
                                        {"ok", r->ok()},
                                        {"shards", r->shards},
                                        {"samples", r->samples},
                                        {"bytes", r->bytes},
                                        {"hashes_checked", r->hashes_checked},
                                        {"problems", problems}}
                     .dump(2)
              << "\n";
  } else {
    for (const Status& p : r->problems)
      std::fprintf(stderr, "gantry data verify: %s\n", p.message().c_str());
    std::printf(
        "%s: %llu shards, %llu samples, %s, %llu hashes checked%s: %s\n", a.url.c_str(),
        static_cast<unsigned long long>(r->shards), static_cast<unsigned long long>(r->samples),
        FormatBytes(r->bytes).c_str(), static_cast<unsigned long long>(r->hashes_checked),
        d->format == data::DatasetFormat::kWebDataset ? " (WebDataset has none; tar "
                                                        "checksums and layout checked)"
                                                      : "",
        r->ok() ? "ok"
                : (std::to_string(r->problems.size()) + " shards damaged or missing").c_str());
  }
  // Damage anywhere (exit 1) outranks a missing or malformed shard (exit 3).
  int code = kExitOk;
  for (const Status& p : r->problems) {
    const int c = ExitCodeFor(p.code());
    if (code == kExitOk || c == kExitFailure) code = c;
  }
  return code;
}

int Pack(DataArgs& a) {
  data::PackOptions o;
  auto format = data::ParseDatasetFormat(a.format);
  if (!format.ok()) return Fail("pack", format.status());
  o.format = *format;
  o.input = a.input;
  for (const std::string& c : a.columns) {
    const size_t eq = c.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == c.size()) {
      return Fail("pack", InvalidArgument("--column '" + c + "': expected NAME=ENCODING"));
    }
    o.encodings[c.substr(0, eq)] = c.substr(eq + 1);
  }
  o.compression = a.compression;
  o.hashes = a.hashes;
  o.shard_bytes = a.shard_size;
  o.shard_samples = a.shard_samples;
  o.gzip = a.gzip;
  o.overwrite = a.overwrite;
  if (o.format == data::DatasetFormat::kWebDataset &&
      (!o.compression.empty() || !o.hashes.empty() || !o.encodings.empty())) {
    return Fail("pack", InvalidArgument("--compression, --hash and --column are for --format mds "
                                        "(use --gzip for WebDataset)"));
  }
  if (o.format == data::DatasetFormat::kMds && (o.gzip || o.shard_samples != 0)) {
    return Fail("pack", InvalidArgument("--gzip and --samples-per-shard are for --format wds"));
  }
  std::unique_ptr<ProgressBar> bar = Bar("pack", a);
  auto r = data::PackDataset(o, a.url, a.store, bar->Callback());
  bar.reset();
  if (!r.ok()) return Fail("pack", r.status());
  if (a.json) {
    std::cout << nlohmann::ordered_json{{"url", a.url},
                                        {"format", data::DatasetFormatName(o.format)},
                                        {"samples", r->samples},
                                        {"input_bytes", r->input_bytes},
                                        {"files", r->shards},
                                        {"removed", r->removed}}
                     .dump(2)
              << "\n";
  } else {
    std::printf("packed %llu samples (%s) into %zu files at %s\n",
                static_cast<unsigned long long>(r->samples), FormatBytes(r->input_bytes).c_str(),
                r->shards.size(), a.url.c_str());
    if (!r->removed.empty()) {
      std::printf("removed %zu files of the dataset it replaced\n", r->removed.size());
    }
  }
  return kExitOk;
}

void AddStoreFlags(CLI::App* cmd, DataArgs& a) {
  cmd->add_option("--endpoint", a.store.endpoint,
                  "S3 endpoint, e.g. http://127.0.0.1:7480 (default: $AWS_ENDPOINT_URL or AWS)");
  cmd->add_option("--region", a.store.region, "S3 region (default: $AWS_REGION, ~/.aws/config)");
  cmd->add_option("--profile", a.store.profile, "AWS profile (default: $AWS_PROFILE)");
}

}  // namespace

void RegisterDataCommands(CLI::App& app) {
  auto a = std::make_shared<DataArgs>();
  CLI::App* data = app.add_subcommand(
      "data", "Pack, inspect and verify datasets (MosaicML Streaming MDS, WebDataset tar).");
  data->require_subcommand(1);
  data->fallthrough();
  data->footer(
      "A dataset URL is a folder holding index.json (MDS) or .tar/.tar.gz shards (WebDataset),\n"
      "or one shard: s3://bucket/prefix, file:///dir (or a path), http://agent:port.\n"
      "Exit codes: 0 ok, 1 failure or damage found, 2 usage, 3 bad input or missing dataset\n"
      "(docs/storage.md, Exit codes). Formats: docs/formats/datasets.md.");
  AddStoreFlags(data, *a);

  CLI::App* inspect = data->add_subcommand("inspect", "Show samples, shards, sizes and columns.");
  inspect->add_option("url", a->url, "Dataset URL")->required();
  inspect->add_flag("--json", a->json, "One JSON object (sizes in bytes)");
  inspect->add_flag("--shards", a->shards, "List every shard too");
  inspect->footer(
      "MDS reads index.json only; WebDataset reads every shard (a tar has no index).\n"
      "Examples:\n"
      "  gantry data inspect s3://bkt/train --endpoint http://127.0.0.1:7480\n"
      "  gantry data inspect /data/wds/shard-000000.tar --json --shards");
  inspect->callback([a] { ExitWith(Inspect(*a)); });

  CLI::App* verify = data->add_subcommand("verify", "Read every shard and check every hash.");
  verify->add_option("url", a->url, "Dataset URL")->required();
  verify->add_flag("--json", a->json, "One JSON object, with each problem's code and message");
  verify->footer(
      "MDS: each file's size, every hash index.json records (sha1, sha256, md5, xxh64, ...),\n"
      "then every sample's layout. WebDataset has no hashes: every tar header checksum, gzip\n"
      "CRC and the sample grouping are checked. All shards are checked; each damaged one is\n"
      "named. Exit 1 on a hash mismatch or damage, 3 for a missing shard or a malformed one.\n"
      "Example:\n"
      "  gantry data verify s3://bkt/train --json");
  verify->callback([a] { ExitWith(Verify(*a)); });

  CLI::App* pack = data->add_subcommand("pack", "Write a dataset from files or a JSONL manifest.");
  pack->add_option("input", a->input,
                   "A folder of <key>.<field> files, or a .jsonl manifest (URL or path)")
      ->required();
  pack->add_option("url", a->url, "Where to write the dataset (a folder URL)")->required();
  pack->add_option("--format", a->format, "mds or wds")->capture_default_str();
  pack->add_option("--column", a->columns,
                   "MDS: NAME=ENCODING for a column (int, int32, float32, str, bytes, jpeg, ...)");
  pack->add_option("--compression", a->compression, "MDS: zstd or zstd:LEVEL");
  pack->add_option("--hash", a->hashes, "MDS: record this digest per file (sha1, xxh64, ...)");
  AddSizeOption(pack, "--shard-size", &a->shard_size,
                "Largest shard, uncompressed (MDS size_limit; WebDataset tar size)");
  pack->add_option("--samples-per-shard", a->shard_samples,
                   "WebDataset: samples per shard (0: by size)");
  pack->add_flag("--gzip", a->gzip, "WebDataset: write shard-NNNNNN.tar.gz");
  pack->add_flag("--overwrite", a->overwrite,
                 "Replace a dataset already in the output folder (refused without it)");
  pack->add_flag("--json", a->json, "JSON summary");
  pack->footer(
      "A folder's files group into samples by key: a/x.jpg and a/x.cls are sample a/x with\n"
      "fields jpg and cls. A manifest line is one sample:\n"
      "  {\"__key__\": \"x\", \"jpg\": {\"path\": \"img/x.jpg\"}, \"txt\": \"a cat\", \"cls\": 3}\n"
      "Examples:\n"
      "  gantry data pack ./images s3://bkt/train --format wds --samples-per-shard 1000\n"
      "  gantry data pack ./samples.jsonl /data/train-mds --format mds --compression zstd "
      "--hash sha1");
  pack->callback([a] { ExitWith(Pack(*a)); });
}

}  // namespace gantry::cli
