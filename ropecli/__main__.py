from ropecli.cli import main

main()
