// Report files: output paths are checked before a run and special files are never replaced;
// `msa report` accepts only run reports with every field it reads.
#include "engine/report.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>

namespace msa {
namespace engine {
namespace {

// A fresh directory under the system's temporary directory, removed with its files.
class TempDir {
 public:
  TempDir() {
    std::string t = "/tmp/msa_report_test.XXXXXX";
    path_ = mkdtemp(&t[0]) != nullptr ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The directory's entries other than keep1 and keep2, sorted, one per line.
std::string others(const TempDir& d, const std::string& keep1, const std::string& keep2 = "") {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(d.path())) {
    const std::string name = e.path().filename().string();
    if (name != keep1 && name != keep2) names.insert(name);
  }
  std::string out;
  for (const std::string& n : names) out += n + "\n";
  return out;
}

TEST(ReportFiles, OutputPathIsCheckedBeforeWriting) {
  TempDir d;
  ASSERT_FALSE(d.path().empty());
  EXPECT_TRUE(check_output_path(d.file("r.json")).ok());
  EXPECT_EQ(others(d, ""), "") << "the probe file was left behind";
  EXPECT_EQ(check_output_path("").code(), StatusCode::kIoError);
  EXPECT_EQ(check_output_path(d.file("missing/r.json")).code(), StatusCode::kIoError);
  EXPECT_EQ(check_output_path(d.path()).code(), StatusCode::kIoError);
  EXPECT_EQ(check_output_path(d.path() + "/").code(), StatusCode::kIoError);
  // Special files are refused without being opened: a device node and a FIFO (opening a FIFO
  // for writing would block).
  const Status dev = check_output_path("/dev/null");
  EXPECT_EQ(dev.code(), StatusCode::kIoError);
  EXPECT_NE(dev.message().find("character device"), std::string::npos) << dev.to_string();
  ASSERT_EQ(mkfifo(d.file("fifo").c_str(), 0600), 0);
  const Status fifo = check_output_path(d.file("fifo"));
  EXPECT_NE(fifo.message().find("a FIFO"), std::string::npos) << fifo.to_string();
  EXPECT_EQ(write_file_atomic(d.file("fifo"), "x").code(), StatusCode::kIoError);
  struct stat st {};
  ASSERT_EQ(lstat(d.file("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(ReportFiles, SymlinksAreNeverReplacedOrFollowed) {
  TempDir d;
  ASSERT_FALSE(d.path().empty());
  { std::ofstream(d.file("target")) << "keep"; }
  ASSERT_EQ(symlink(d.file("target").c_str(), d.file("link").c_str()), 0);
  const Status s = write_file_atomic(d.file("link"), "new");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.to_string();
  struct stat st {};
  ASSERT_EQ(lstat(d.file("link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(read(d.file("target")), "keep");
  // A symlink where the old fixed temporary name was (path.tmp) is not followed either.
  ASSERT_EQ(symlink(d.file("target").c_str(), d.file("r.json.tmp").c_str()), 0);
  ASSERT_TRUE(write_file_atomic(d.file("r.json"), "report").ok());
  EXPECT_EQ(read(d.file("r.json")), "report");
  EXPECT_EQ(read(d.file("target")), "keep");
  EXPECT_EQ(others(d, "r.json", "target"), "link\nr.json.tmp\n") << "temporary file left";
}

json::Json parsed(const std::string& text) {
  json::Json v;
  EXPECT_TRUE(json::parse(text, &v).ok()) << text;
  return v;
}

TEST(ReportFiles, ValidateReportNamesTheFirstBadField) {
  EXPECT_EQ(validate_report(parsed("[]")).code(), StatusCode::kParseError);
  const Status no_schema = validate_report(parsed(R"({"steps": [], "summary": {}})"));
  EXPECT_EQ(no_schema.code(), StatusCode::kParseError);
  EXPECT_NE(no_schema.message().find("'schema'"), std::string::npos) << no_schema.to_string();
  const Status no_backend = validate_report(parsed(R"({"schema": "msa-run-report/1"})"));
  EXPECT_NE(no_backend.message().find("'report.backend' is missing"), std::string::npos)
      << no_backend.to_string();
  const Status bad_type = validate_report(
      parsed(R"({"schema": "msa-run-report/1", "backend": "cpu", "device": "x", "model": []})"));
  EXPECT_NE(bad_type.message().find("'report.model' is not an object"), std::string::npos)
      << bad_type.to_string();
}

// A run of one step whose stages took `indexer_ms`, `attention_ms` (each a quarter in its
// decode and the rest in its prefill stage) and `insert_ms`, reaching `context`.
RunResult one_step_run(double indexer_ms, double attention_ms, int64_t context,
                       double insert_ms = 0.0) {
  RunResult r;
  StepRecord step;
  step.max_context = context;
  step.stages[kStageIndexerDecode] = indexer_ms / 4;
  step.stages[kStageIndexerPrefill] = indexer_ms * 3 / 4;
  step.stages[kStageAttentionDecode] = attention_ms / 4;
  step.stages[kStageAttentionPrefill] = attention_ms * 3 / 4;
  step.stages[kStageInsert] = insert_ms;
  step.latency_ms = indexer_ms + attention_ms + insert_ms;
  r.steps.push_back(step);
  r.busy_s = r.wall_s = step.latency_ms / 1e3;
  r.requests.resize(1);
  return r;
}

json::Json compare_report(const RunResult& sparse, const RunResult& dense) {
  ReportContext ctx;
  ctx.model = ModelConfig::minimax_m3();  // top-16 blocks of 128: 2048 keys a row
  return build_report(ctx, sparse, &dense);
}

std::string compare_summary(const RunResult& sparse, const RunResult& dense) {
  return format_summary(compare_report(sparse, dense));
}

TEST(ReportSummary, TopkUnionOnlyWhenGathered) {
  RunResult r = one_step_run(300.0, 800.0, 3000);
  r.topk_union.rows = 10;
  r.topk_union.selected = 150;
  for (int w = 0; w < kUnionWindowCount; ++w) {
    r.topk_union.windows[w] = 2;
    r.topk_union.blocks[w] = 40 + 10 * w;
  }
  ReportContext ctx;
  ctx.model = ModelConfig::minimax_m3();
  EXPECT_EQ(json::find(build_report(ctx, r, nullptr)["summary"], "topk_union"), nullptr);
  ctx.topk_union = true;
  const json::Json rep = build_report(ctx, r, nullptr);
  const json::Json& tu = rep["summary"]["topk_union"];
  EXPECT_EQ(tu["rows"].get<int64_t>(), 10);
  EXPECT_DOUBLE_EQ(tu["mean_selected"].get<double>(), 15.0);
  EXPECT_EQ(tu["windows"][2]["positions"].get<int64_t>(), 16);
  EXPECT_DOUBLE_EQ(tu["windows"][3]["mean_blocks"].get<double>(), 35.0);
  EXPECT_TRUE(validate_report(rep).ok()) << validate_report(rep).to_string();
  const std::string text = format_summary(rep);
  const std::string line =
      "  top-k union 15.0 blocks a prefill row; distinct blocks of aligned windows of 4 "
      "positions 20.0, 8 positions 25.0, 16 positions 30.0, 32 positions 35.0 (10 rows)";
  EXPECT_NE(text.find(line), std::string::npos) << text;
  json::Json bad = rep;
  bad["summary"]["topk_union"]["windows"][0].erase("mean_blocks");
  const Status s = validate_report(bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("summary.topk_union.windows.0"), std::string::npos) << s.message();
  json::Json not_object = rep;
  not_object["summary"]["topk_union"]["windows"][1] = 3;
  const Status n = validate_report(not_object);
  EXPECT_NE(n.message().find("'summary.topk_union.windows.1' is no object"), std::string::npos)
      << n.message();
  json::Json bad_step = rep;
  bad_step["steps"][0] = json::Json::array();
  const Status b = validate_report(bad_step);
  EXPECT_NE(b.message().find("'report.steps.0' is no object"), std::string::npos) << b.message();
}

TEST(ReportSummary, StagesAreSplitByRowKind) {
  const json::Json rep =
      compare_report(one_step_run(300.0, 800.0, 3000), one_step_run(0.0, 1000.0, 3000));
  const json::Json& st = rep["summary"]["stage_ms"];
  EXPECT_EQ(st["indexer_decode"].get<double>(), 75.0);
  EXPECT_EQ(st["indexer_prefill"].get<double>(), 225.0);
  EXPECT_EQ(st["attention_decode"].get<double>(), 200.0);
  EXPECT_EQ(st["attention_prefill"].get<double>(), 600.0);
  EXPECT_EQ(json::find(st, "indexer_topk"), nullptr);
  EXPECT_EQ(json::find(st, "attention"), nullptr);
  EXPECT_EQ(rep["steps"][0]["stage_ms"], st);
  // Dense attention over sparse attention plus indexer, each summed over both row kinds.
  EXPECT_DOUBLE_EQ(rep["compare_dense"]["attention_speedup"].get<double>(), 1000.0 / 1100.0);
  const std::string text = format_summary(rep);
  for (const char* line :
       {"   75.0 ms   6.8%  indexer_decode     index scores + top-k, decode rows",
        "  225.0 ms  20.5%  indexer_prefill    index scores + top-k, prefill rows",
        "  200.0 ms  18.2%  attention_decode   attention, decode rows",
        "  600.0 ms  54.5%  attention_prefill  attention, prefill rows"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

// Reports written before the indexer and attention stages were split by row kind have one
// indexer_topk and one attention stage: `msa report` shows them as they are and sums them as
// the split stages; a stage it does not know is shown by its name.
TEST(ReportSummary, ReadsReportsWithUnsplitStages) {
  json::Json rep =
      compare_report(one_step_run(300.0, 800.0, 3000), one_step_run(0.0, 1000.0, 3000));
  auto unsplit = [](json::Json* stages) {
    json::Json old = json::Json::object();
    for (const auto& kv : stages->items()) {
      const std::string& k = kv.key();
      const std::string name = k.rfind("indexer_", 0) == 0     ? "indexer_topk"
                               : k.rfind("attention_", 0) == 0 ? "attention"
                                                               : k;
      old[name] = (old.contains(name) ? old[name].get<double>() : 0.0) + kv.value().get<double>();
    }
    *stages = old;
  };
  unsplit(&rep["summary"]["stage_ms"]);
  unsplit(&rep["compare_dense"]["dense"]["stage_ms"]);
  unsplit(&rep["steps"][0]["stage_ms"]);
  rep["summary"]["stage_ms"]["future_stage"] = 100.0;
  ASSERT_TRUE(validate_report(rep).ok()) << validate_report(rep).to_string();
  const std::string text = format_summary(rep);
  EXPECT_NE(text.find("  300.0 ms  25.0%  indexer_topk       index scores + top-k, decode + "
                      "prefill rows\n"
                      "                  800.0 ms  66.7%  attention          attention, "
                      "decode + prefill rows\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  100.0 ms   8.3%  future_stage\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("indexer_decode"), std::string::npos) << text;
  EXPECT_NE(text.find("why slower  short contexts: the indexer+top-k (300 ms) costs more than "
                      "the attention it saves (200 ms)"),
            std::string::npos)
      << text;
}

// When sparse is slower than dense the summary says why: at short contexts the indexer costs
// more than the attention it saves.
TEST(ReportSummary, SaysWhySparseWasSlower) {
  const std::string slower =
      compare_summary(one_step_run(300.0, 800.0, 3000), one_step_run(0.0, 1000.0, 3000));
  EXPECT_NE(slower.find("why slower  short contexts: the indexer+top-k (300 ms) costs more than "
                        "the attention it saves (200 ms)"),
            std::string::npos)
      << slower;
  EXPECT_NE(slower.find("top-k keeps 2048 keys a row and contexts here reach 3000 tokens"),
            std::string::npos)
      << slower;
  const std::string other =
      compare_summary(one_step_run(100.0, 500.0, 3000, 400.0), one_step_run(0.0, 850.0, 3000));
  EXPECT_NE(other.find("why slower  the indexer+top-k (100 ms) costs less than the attention it "
                       "saves (350 ms)"),
            std::string::npos)
      << other;
  const std::string faster =
      compare_summary(one_step_run(100.0, 300.0, 30000), one_step_run(0.0, 1000.0, 30000));
  EXPECT_EQ(faster.find("why slower"), std::string::npos) << faster;
}

}  // namespace
}  // namespace engine
}  // namespace msa
