#include "perf_options.h"

#include <getopt.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace chorus::perf {
namespace {

void printUsage(const char* program) {
  std::fprintf(stderr,
               "USAGE: %s\n"
               "  [-t,--nthreads <num threads>]\n"
               "  [-g,--ngpus <ranks per thread>]\n"
               "  [-b,--minbytes <min size in bytes>]\n"
               "  [-e,--maxbytes <max size in bytes>]\n"
               "  [-i,--stepbytes <increment size>]\n"
               "  [-f,--stepfactor <increment factor>]\n"
               "  [-n,--iters <iteration count>]\n"
               "  [-m,--agg_iters <aggregated iteration count>]\n"
               "  [-w,--warmup_iters <warmup iteration count>]\n"
               "  [-p,--parallel_init <0/1>]\n"
               "  [-c,--check <check iteration count>]\n"
               "  [-o,--op <sum/prod/min/max/avg/mulsum/all>]\n"
               "  [-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/f8e4m3/f8e5m2/all>]\n"
               "  [-r,--root <root>]\n"
               "  [-z,--blocking <0/1>]\n"
               "  [-G,--cudagraph <num graph launches>] (ignored: no CUDA graphs on the CPU executor)\n"
               "  [-C,--report_cputime <0/1>]\n"
               "  [-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>]\n"
               "  [-R,--local_register <0/1> register each rank's buffers with ncclCommRegister]\n"
               "  [-h,--help]\n",
               program);
}

}  // namespace

int parsePerfOptions(int argc, char** argv, PerfOptions* o) {
  static const option kLongOptions[] = {{"nthreads", required_argument, nullptr, 't'},
                                        {"ngpus", required_argument, nullptr, 'g'},
                                        {"minbytes", required_argument, nullptr, 'b'},
                                        {"maxbytes", required_argument, nullptr, 'e'},
                                        {"stepbytes", required_argument, nullptr, 'i'},
                                        {"stepfactor", required_argument, nullptr, 'f'},
                                        {"iters", required_argument, nullptr, 'n'},
                                        {"agg_iters", required_argument, nullptr, 'm'},
                                        {"warmup_iters", required_argument, nullptr, 'w'},
                                        {"parallel_init", required_argument, nullptr, 'p'},
                                        {"check", required_argument, nullptr, 'c'},
                                        {"op", required_argument, nullptr, 'o'},
                                        {"datatype", required_argument, nullptr, 'd'},
                                        {"root", required_argument, nullptr, 'r'},
                                        {"blocking", required_argument, nullptr, 'z'},
                                        {"cudagraph", required_argument, nullptr, 'G'},
                                        {"report_cputime", required_argument, nullptr, 'C'},
                                        {"average", required_argument, nullptr, 'a'},
                                        {"local_register", required_argument, nullptr, 'R'},
                                        {"help", no_argument, nullptr, 'h'},
                                        {nullptr, 0, nullptr, 0}};
  optind = 1;
  int c, flag = 0;
  const std::string letters = std::string(kSweepFlagLetters) + "t:g:m:p:o:d:r:z:G:C:a:R:h";
  while ((c = getopt_long(argc, argv, letters.c_str(), kLongOptions, nullptr)) != -1) {
    bool ok = true;
    const FlagParse sweep = parseSweepFlag(c, optarg, o);
    if (sweep != FlagParse::NotASweepFlag) {
      ok = sweep == FlagParse::Ok;
    } else {
      switch (c) {
        case 't':
          ok = parseInt(optarg, 1, &o->nThreads);
          break;
        case 'g':
          ok = parseInt(optarg, 1, &o->nGpus);
          break;
        case 'm':
          ok = parseInt(optarg, 1, &o->aggIters);
          break;
        case 'p':
          ok = parseInt(optarg, 0, &flag);
          o->parallelInit = flag != 0;
          break;
        case 'o':
          ok = parseOpList(optarg, &o->ops);
          break;
        case 'd':
          ok = parseTypeList(optarg, &o->types);
          break;
        case 'r':
          ok = parseInt(optarg, 0, &o->root);
          break;
        case 'z':
          ok = parseInt(optarg, 0, &flag);
          o->blocking = flag != 0;
          break;
        case 'G':
          std::fprintf(stderr, "# -G/--cudagraph %s ignored: the CPU executor has no CUDA graphs\n", optarg);
          break;
        case 'C':
          ok = parseInt(optarg, 0, &flag);
          o->reportCpuTime = flag != 0;
          break;
        case 'a':
          ok = parseInt(optarg, 0, &flag) && flag <= 3;
          o->average = static_cast<AverageMode>(flag);
          break;
        case 'R':  // nccl-tests' 2 (symmetric windows) is not one of the perf tools' modes
          ok = parseInt(optarg, 0, &flag) && flag <= 1;
          o->localRegister = flag != 0;
          break;
        case 'h':
          printUsage(argv[0]);
          return -1;
        default:
          printUsage(argv[0]);
          return 1;
      }
    }
    if (!ok) {
      std::fprintf(stderr, "%s: invalid value '%s' for -%c\n", argv[0], optarg, c);
      printUsage(argv[0]);
      return 1;
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
    printUsage(argv[0]);
    return 1;
  }
  if (o->minBytes > o->maxBytes) {
    std::fprintf(stderr, "%s: minBytes %zu is larger than maxBytes %zu\n", argv[0], o->minBytes, o->maxBytes);
    return 1;
  }
  return 0;
}

}  // namespace chorus::perf
