from recovery.cli import main

main(prog_name="recovery")
