/* cli.h — the subcommands of `lyco` (one file each). Each returns the process exit code. */
#ifndef LYCO_CLI_H
#define LYCO_CLI_H
int lyco_cmd_check(int argc, char **argv);
int lyco_cmd_bench(int argc, char **argv);
#endif
