"""Lecture 1's toolkit, imported by every later lecture: the toy world (fm_world), the tiny
GPT and its training loop (tiny_gpt), console tables (console) and the shared command-line
pieces (cli_args). The numbered files beside these modules are lecture 1's scripts."""
